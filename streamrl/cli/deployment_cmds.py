"""`streamrl deployments create | list | show | update | delete | promote`: a base model with the team's adapters
served on /openai/v1 by replicas that scale with traffic (docs/openai.md#deployments).

    streamrl deployments create support --base chat-tiny --adapter job:12@best --min 0 --max 2 --idle 300
    streamrl deployments promote job:12@40 --name support          # that checkpoint first in `support`
    streamrl deployments update 3 --min 1                           # keep one replica warm
"""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_table

deployments_app = typer.Typer(help="Deployments: serve a base model and its adapters under stable names.",
                              no_args_is_help=True)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.0f} ms"


def _row(d: dict[str, Any]) -> dict[str, Any]:
    m = d.get("metrics") or {}
    ready = sum(1 for r in d.get("replicas", []) if r.get("state") == "ready")
    return {"id": d["id"], "name": d["name"], "base": d["base_model"], "adapters": len(d["adapters"]),
            "replicas": f"{ready}/{d['min_replicas']}-{d['max_replicas']}",
            "req/s": f"{m.get('requests_per_s', 0):.2f}", "p50": _ms(m.get("p50_latency_s")),
            "p99": _ms(m.get("p99_latency_s")), "tok/s": f"{m.get('tokens_per_s', 0):.1f}"}


COLUMNS = ["id", "name", "base", "adapters", "replicas", "req/s", "p50", "p99", "tok/s"]


def _show(ctx: typer.Context, body: dict[str, Any]) -> None:
    if emit_json(ctx, body):
        return
    print_table([_row(body)], COLUMNS)
    for adapter in body["adapters"]:
        typer.echo(f"  adapter {adapter}")
    for replica in body.get("replicas", []):
        typer.echo(f"  replica {replica['id']}: {replica['state']} ({replica.get('in_flight', 0)} in flight, "
                   f"{replica.get('served', 0)} served)")


@deployments_app.command("create")
def create(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="the model id clients call (model=<name>)"),
    base: str = typer.Option(..., "--base", help="a registered model of the team"),
    adapter: list[str] = typer.Option([], "--adapter", "-a", help="an adapter id (ft:... or job:<id>@best|@last|@N); "
                                      "repeat for several, the first answers model=<name>"),
    min_replicas: int = typer.Option(0, "--min", help="replicas kept running (0: scale to zero when idle)"),
    max_replicas: int = typer.Option(1, "--max", help="replicas under load at most"),
    idle_s: float = typer.Option(300.0, "--idle", help="seconds idle before a replica above --min stops"),
) -> None:
    """Create a deployment."""
    with client(ctx) as api:
        body = api.create_deployment({"name": name, "base_model": base, "adapters": adapter,
                                      "min_replicas": min_replicas, "max_replicas": max_replicas, "idle_s": idle_s})
    _show(ctx, body)


@deployments_app.command("list")
def list_(ctx: typer.Context) -> None:
    """The team's deployments with replicas, requests/s, p50/p99 latency and tokens/s (last minute)."""
    with client(ctx) as api:
        found = api.list_deployments()
    if emit_json(ctx, found):
        return
    print_table([_row(d) for d in found], COLUMNS, empty="(no deployments)")


@deployments_app.command("show")
def show(ctx: typer.Context, deployment_id: int) -> None:
    """One deployment: metrics, adapters, replicas."""
    with client(ctx) as api:
        body = api.get_deployment(deployment_id)
    _show(ctx, body)


@deployments_app.command("update")
def update(
    ctx: typer.Context,
    deployment_id: int,
    name: str | None = typer.Option(None, "--name"),
    base: str | None = typer.Option(None, "--base"),
    adapter: list[str] = typer.Option([], "--adapter", "-a", help="the new adapter list (replaces it)"),
    min_replicas: int | None = typer.Option(None, "--min"),
    max_replicas: int | None = typer.Option(None, "--max"),
    idle_s: float | None = typer.Option(None, "--idle"),
) -> None:
    """Change fields; new adapters or base model restart the replicas."""
    changes: dict[str, Any] = {k: v for k, v in {"name": name, "base_model": base, "min_replicas": min_replicas,
                                                 "max_replicas": max_replicas, "idle_s": idle_s}.items()
                               if v is not None}
    if adapter:
        changes["adapters"] = adapter
    with client(ctx) as api:
        body = api.update_deployment(deployment_id, changes)
    _show(ctx, body)


@deployments_app.command("promote")
def promote(
    ctx: typer.Context,
    checkpoint: str = typer.Argument(..., help="job:<id>@<iteration>|@best|@last, or an ft: id"),
    name: str = typer.Option(..., "--name", help="the deployment (created if the team has none so named)"),
    base: str | None = typer.Option(None, "--base", help="base model, for a new deployment"),
) -> None:
    """Serve a checkpoint as the first adapter of a deployment."""
    with client(ctx) as api:
        body = api.promote_checkpoint({"adapter": checkpoint, "name": name, "base_model": base})
    _show(ctx, body)


@deployments_app.command("delete")
def delete(ctx: typer.Context, deployment_id: int) -> None:
    """Delete a deployment; its replicas stop once idle."""
    with client(ctx) as api:
        api.delete_deployment(deployment_id)
    if not emit_json(ctx, {"deleted": deployment_id}):
        typer.echo(f"deployment {deployment_id} deleted")


def register(app: typer.Typer) -> None:
    app.add_typer(deployments_app, name="deployments")
