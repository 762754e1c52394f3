"""`streamrl jobs tag | note`: a run's tags and notes (PATCH /jobs/{id}); `jobs list --tag/--search` filters on
them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from streamrl.cli.common import client, emit_json
from streamrl.cli.errors import CLIError
from streamrl.cli.jobs import jobs_app


def _print_annotations(ctx: typer.Context, job: dict[str, Any]) -> None:
    if emit_json(ctx, job):
        return
    tags = job.get("tags") or []
    typer.echo(f"job {job.get('id')} {job.get('name')!r}: tags {', '.join(tags) if tags else '(none)'}")
    if job.get("notes"):
        typer.echo(f"notes:\n{job['notes']}")


@jobs_app.command("tag")
def tag(
    ctx: typer.Context,
    job_id: int,
    tags: list[str] | None = typer.Argument(None, help="tags to add (letters, digits and _ . : = + -)"),
    remove: list[str] | None = typer.Option(None, "--remove", "-r", help="a tag to remove (repeatable)"),
    replace: bool = typer.Option(False, "--replace", help="the given tags become the whole list"),
) -> None:
    """Add (or with --remove take away) tags of a job; with no tags, show them."""
    with client(ctx) as api:
        if replace:
            job = api.annotate_job(job_id, tags=list(tags or []))
        elif tags or remove:
            job = api.annotate_job(job_id, add_tags=list(tags or []), remove_tags=list(remove or []))
        else:
            job = api.get_job(job_id)
    _print_annotations(ctx, job)


@jobs_app.command("note")
def note(
    ctx: typer.Context,
    job_id: int,
    text: str | None = typer.Argument(None, help="the notes (replace the old ones); '-' reads standard input"),
    file: Path | None = typer.Option(None, "--file", "-f", help="read the notes from a file"),
    clear: bool = typer.Option(False, "--clear", help="remove the notes"),
) -> None:
    """Set (or --clear) a job's notes; with no text, show them."""
    given = sum((text is not None, file is not None, clear))
    if given > 1:
        raise CLIError("give the notes as TEXT, --file or --clear, not several")
    if file is not None:
        if not file.is_file():
            raise CLIError(f"no such file: {file}")
        text = file.read_text()
    elif text == "-":
        text = sys.stdin.read()
    with client(ctx) as api:
        job = api.annotate_job(job_id, notes="" if clear else text) if given else api.get_job(job_id)
    _print_annotations(ctx, job)


def register(app: typer.Typer) -> None:
    """The commands live on `jobs_app` (registered by streamrl.cli.jobs); importing this module adds them."""
