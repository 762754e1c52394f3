"""`streamrl datasets upload | list | rows`: JSONL prompt sets (one JSON object with a `prompt` per line)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError

datasets_app = typer.Typer(help="Datasets of the current team.", no_args_is_help=True)


@datasets_app.command("upload")
def upload(
    ctx: typer.Context,
    file: Path = typer.Argument(..., help="JSONL file"),
    name: str | None = typer.Option(None, "--name", help="default: the file name without extension"),
) -> None:
    """Upload a JSONL dataset; the server checks every line and names the first bad one."""
    if not file.is_file():
        raise CLIError(f"no such file: {file}")
    with client(ctx) as api:
        ds = api.upload_dataset(file, name)
    if not emit_json(ctx, ds):
        typer.echo(f"uploaded dataset {ds.get('id')} {ds.get('name')!r}: {ds.get('row_count')} rows, "
                   f"{ds.get('size_bytes')} bytes")


@datasets_app.command("list")
def list_datasets(ctx: typer.Context) -> None:
    """Datasets of the current team."""
    with client(ctx) as api:
        page = api.list_datasets()
    if not emit_json(ctx, page):
        print_table(page.get("data", []), ["id", "name", "row_count", "size_bytes", "created_at"])


@datasets_app.command("rows")
def rows(
    ctx: typer.Context,
    dataset_id: int,
    limit: int = typer.Option(10, "--limit", min=1),
    offset: int = typer.Option(0, "--offset", min=0),
) -> None:
    """Print some rows of a dataset as JSON lines."""
    with client(ctx) as api:
        page = api.dataset_rows(dataset_id, limit=limit, offset=offset)
    if emit_json(ctx, page):
        return
    for row in page.get("data", []):
        typer.echo(json.dumps(row))


def register(app: typer.Typer) -> None:
    app.add_typer(datasets_app, name="datasets")
