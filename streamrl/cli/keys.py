"""`streamrl keys create | list | revoke`: API keys for automation (Bearer tokens bound to one team)."""

from __future__ import annotations

import typer

from streamrl.cli.common import client, emit_json, print_table

keys_app = typer.Typer(help="API keys of the current team.", no_args_is_help=True)


@keys_app.command("create")
def create(
    ctx: typer.Context,
    name: str,
    scope: list[str] | None = typer.Option(None, "--scope", help="repeatable; default: the server's default scopes"),
) -> None:
    """Create a key (admin). The secret is printed once; the server keeps only its hash."""
    with client(ctx) as api:
        key = api.create_key(name, scope or None)
    if emit_json(ctx, key):
        return
    typer.echo(f"created key {key.get('id')} {key.get('name')!r} (prefix {key.get('prefix')})")
    typer.echo(f"secret (shown once, store it now): {key.get('secret')}")


@keys_app.command("list")
def list_keys(ctx: typer.Context) -> None:
    """Keys of the current team (never their secrets)."""
    with client(ctx) as api:
        page = api.list_keys()
    if not emit_json(ctx, page):
        columns = ["id", "name", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
        print_table(page.get("data", []), columns)


@keys_app.command("revoke")
def revoke(ctx: typer.Context, key_id: int) -> None:
    """Revoke a key (admin); it is refused from the next request on."""
    with client(ctx) as api:
        api.revoke_key(key_id)
    typer.echo(f"revoked key {key_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
