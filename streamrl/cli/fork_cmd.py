"""`streamrl jobs fork ID --iteration N [--set training.lr=1e-5 ...]`: a new job from one of a job's checkpoints
with changed settings (POST /jobs/{id}/fork); `jobs get` of the fork shows its parent."""

from __future__ import annotations

from typing import Any

import typer
import yaml

from streamrl.cli.common import client, emit_json
from streamrl.cli.errors import CLIError
from streamrl.cli.jobs import jobs_app


def parse_overrides(assignments: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs as the API's dotted-key overrides (each value parsed as YAML)."""
    overrides: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--set wants KEY=VALUE with a dotted key, e.g. training.lr=1e-5 (got {assignment!r})")
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            overrides[key.strip()] = value
    return overrides


@jobs_app.command("fork")
def fork(
    ctx: typer.Context,
    job_id: int,
    iteration: int = typer.Option(..., "--iteration", "-i", min=0, help="the checkpoint's iteration to start from"),
    overrides: list[str] | None = typer.Option(None, "--set", help="KEY=VALUE, repeatable: training.lr=1e-5, "
                                               "mode=async, name=my-fork"),
) -> None:
    """Start a new job from JOB_ID's checkpoint of --iteration with changed settings; it records its parent."""
    with client(ctx) as api:
        job = api.fork_job(job_id, iteration, parse_overrides(list(overrides or [])))
    if not emit_json(ctx, job):
        typer.echo(f"forked job {job_id} at iteration {iteration} as job {job.get('id')} {job.get('name')!r}: "
                   f"status {job.get('status')}")


def register(app: typer.Typer) -> None:
    """The command lives on `jobs_app` (registered by streamrl.cli.jobs); importing this module adds it."""
