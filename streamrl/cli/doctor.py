"""`streamrl doctor`: what this host has for the platform (the checks `streamrl up` makes, plus GPUs, vLLM, user
namespaces and privileges), one line each with its fix. Exit status 1 when something `up` needs is missing."""

from __future__ import annotations

import typer

from streamrl.cli import host_checks
from streamrl.cli.common import emit_json
from streamrl.cli.up import settings_for


def doctor(
    ctx: typer.Context,
    data_dir: str | None = typer.Option(None, "--data-dir", help="default: $STREAMRL_DATA_DIR or ./data"),
) -> None:
    """Check this host: reward jail, Redis, database, disk, user namespaces, GPUs, vLLM."""
    from pathlib import Path

    checks = host_checks.doctor_checks(settings_for(Path(data_dir) if data_dir else None))
    if not emit_json(ctx, [check.as_dict() for check in checks]):
        for check in checks:
            typer.echo(check.line())
    if any(check.blocking and not check.ok for check in checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
