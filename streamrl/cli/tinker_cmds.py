"""`streamrl tinker sessions | session JOB_ID`: the team's Tinker training clients (docs/tinker.md).
    streamrl tinker sessions          # owner, base model, steps, last call, parked, checkpoints, user metadata
    streamrl tinker session 42        # + each checkpoint's expiry and visibility, and the loss / step time per step
"""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_fields, print_table

tinker_app = typer.Typer(help="Tinker training clients of the current team (the Tinker-compatible API).",
                         no_args_is_help=True)


def _metadata(value: dict[str, str] | None) -> str | None:
    return ", ".join(f"{k}={v}" for k, v in value.items()) if value else None


@tinker_app.command("sessions")
def sessions(ctx: typer.Context) -> None:
    """Every training client, newest first."""
    with client(ctx) as api:
        listing = api.tinker_sessions()
    if emit_json(ctx, listing):
        return
    rows: list[dict[str, Any]] = [
        {"job": item["job_id"], "model_id": item["model_id"], "owner": item["owner"], "base_model": item["base_model"],
         "status": item["status"], "steps": item["steps"], "last_call": item["last_call"],
         "checkpoints": len(item["checkpoints"]), "user_metadata": _metadata(item["user_metadata"])}
        for item in listing]
    print_table(rows, ["job", "model_id", "owner", "base_model", "status", "steps", "last_call", "checkpoints",
                       "user_metadata"], empty="(no Tinker training clients)")


@tinker_app.command("session")
def session(ctx: typer.Context, job_id: int = typer.Argument(..., help="the session's job id")) -> None:
    """One training client: its fields, checkpoints and steps."""
    with client(ctx) as api:
        detail = api.tinker_session(job_id)
    if emit_json(ctx, detail):
        return
    print_fields({name: detail[name] for name in ("job_id", "model_id", "owner", "api_key", "base_model",
                                                    "lora_rank", "status", "parked", "steps", "last_call")}
                 | {"user_metadata": _metadata(detail["user_metadata"])})
    typer.echo("\ncheckpoints:")
    print_table([{**c, "user_metadata": _metadata(c["user_metadata"]), "expires_at": c["expires_at"] or "never"}
                 for c in detail["checkpoints"]],
                ["tinker_path", "checkpoint_type", "time", "expires_at", "public", "user_metadata"])
    typer.echo("\nsteps:")
    print_table(detail["steps_series"], ["step", "loss", "step_seconds", "tokens", "at"])


def register(app: typer.Typer) -> None:
    app.add_typer(tinker_app, name="tinker")
