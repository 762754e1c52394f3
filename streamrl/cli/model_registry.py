"""`streamrl models register | list`: models a job may load (a directory the server allows)."""

from __future__ import annotations

import typer

from streamrl.cli.common import client, emit_json, print_table

models_app = typer.Typer(help="Registered models of the current team.", no_args_is_help=True)


@models_app.command("register")
def register_model(ctx: typer.Context, name: str, path: str) -> None:
    """Register a model directory (on the server: under the artifact dir or an allow-listed root)."""
    with client(ctx) as api:
        model = api.register_model(name, path)
    if not emit_json(ctx, model):
        typer.echo(f"registered model {model.get('id')} {model.get('name')!r} -> {model.get('path')}")


@models_app.command("list")
def list_models(ctx: typer.Context) -> None:
    """Models registered by the current team."""
    with client(ctx) as api:
        page = api.list_models()
    if not emit_json(ctx, page):
        print_table(page.get("data", []), ["id", "name", "path", "created_at"])


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
