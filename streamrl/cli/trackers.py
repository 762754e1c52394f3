"""`streamrl trackers list | set | delete | runs`: the team's experiment-tracker connections and a job's tracker runs.

    streamrl trackers set mlflow --tracking-uri http://mlflow.internal:5000 --token "$MLFLOW_TOKEN"
    streamrl trackers set wandb --api-key "$WANDB_API_KEY" --entity my-lab
    streamrl trackers runs 12          # iterations sent to each tracker, and whether one is down

Secrets are write-only: `list` says only whether each is set. Jobs name trackers in `telemetry.trackers`.
"""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError

trackers_app = typer.Typer(help="Experiment-tracker connections of the current team (MLflow, W&B).",
                           no_args_is_help=True)
KINDS = ("mlflow", "wandb")


@trackers_app.command("list")
def list_trackers(ctx: typer.Context) -> None:
    """The team's connections; secrets only as set / not set."""
    with client(ctx) as api:
        page = api.list_trackers()
    if emit_json(ctx, page):
        return
    rows = [{**row, "secrets": ", ".join(f"{k}: {'set' if v else 'not set'}" for k, v in row["secrets"].items())}
            for row in page.get("data", [])]
    print_table(rows, ["kind", "tracking_uri", "username", "base_url", "entity", "secrets", "updated_at"])


@trackers_app.command("set")
def set_tracker(
    ctx: typer.Context,
    kind: str = typer.Argument(..., help="mlflow | wandb"),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help="mlflow: the tracking server"),
    username: str | None = typer.Option(None, "--username", help="mlflow: basic-auth user"),
    password: str | None = typer.Option(None, "--password", help="mlflow: basic-auth password"),
    token: str | None = typer.Option(None, "--token", help="mlflow: bearer token"),
    api_key: str | None = typer.Option(None, "--api-key", help="wandb: API key"),
    entity: str | None = typer.Option(None, "--entity", help="wandb: entity runs go to"),
    base_url: str | None = typer.Option(None, "--base-url", help="wandb: a self-hosted server"),
) -> None:
    """Create or change a connection (admin); secrets not given are kept, "" clears one, and a new --tracking-uri or
    --base-url forgets the stored user and secrets not given with it."""
    if kind not in KINDS:
        raise CLIError(f"kind must be one of {', '.join(KINDS)} (tensorboard needs no connection)")
    given: dict[str, Any] = {"tracking_uri": tracking_uri, "username": username, "password": password,
                             "token": token, "api_key": api_key, "entity": entity, "base_url": base_url}
    with client(ctx) as api:
        row = api.set_tracker(kind, {k: v for k, v in given.items() if v is not None})
    if not emit_json(ctx, row):
        secrets = ", ".join(f"{k} {'set' if v else 'not set'}" for k, v in row["secrets"].items())
        typer.echo(f"{kind} connection saved ({secrets})")


@trackers_app.command("delete")
def delete(ctx: typer.Context, kind: str) -> None:
    """Forget a connection (admin)."""
    with client(ctx) as api:
        api.delete_tracker(kind)
    typer.echo(f"deleted the {kind} connection")


@trackers_app.command("runs")
def runs(ctx: typer.Context, job_id: int) -> None:
    """A job's tracker runs: run id, iterations sent, and whether the tracker is down (metrics buffered)."""
    with client(ctx) as api:
        page = api.job_trackers(job_id)
    if not emit_json(ctx, page):
        print_table(page.get("data", []), ["tracker", "run_ref", "sent_iteration", "finished", "down_since",
                                           "last_error"])


def register(app: typer.Typer) -> None:
    app.add_typer(trackers_app, name="trackers")
