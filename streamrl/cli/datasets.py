"""`streamrl datasets upload | register | list | rows`: prompt sets uploaded (JSONL, Parquet, CSV) or one split of a
Hub dataset (`register NAME --hub ID --split S [--revision R] [--wait]`)."""

from __future__ import annotations

import json
import time
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


@datasets_app.command("register")
def register_hub(
    ctx: typer.Context,
    name: str,
    hub: str = typer.Option(..., help="Hugging Face dataset id (owner/name)"),
    split: str = typer.Option(..., help="the split to import (train, test, ...)"),
    revision: str = typer.Option("main", help="branch, tag or commit of --hub"),
    wait: bool = typer.Option(False, help="wait until the import is ready or failed"),
) -> None:
    """Register one split of a Hub dataset: downloaded and validated in the background, like an upload."""
    with client(ctx) as api:
        ds = api.register_hub_dataset(name, hub, split=split, revision=revision)
        while wait and ds.get("state") == "downloading":
            time.sleep(1.0)
            ds = api.get_dataset(int(ds["id"]))
    if not emit_json(ctx, ds):
        state = ds.get("state")
        detail = {"ready": f": {ds.get('row_count')} rows, {ds.get('size_bytes')} bytes",
                  "failed": f": {ds.get('error')}"}.get(str(state), "")
        typer.echo(f"dataset {ds.get('id')} {ds.get('name')!r} from {hub}[{split}]@{revision}: {state}{detail}")
    if ds.get("state") == "failed":
        raise typer.Exit(1)


@datasets_app.command("list")
def list_datasets(ctx: typer.Context) -> None:
    """Datasets of the current team."""
    with client(ctx) as api:
        page = api.list_datasets()
    if not emit_json(ctx, page):
        print_table(page.get("data", []), ["id", "name", "state", "row_count", "size_bytes", "created_at"])


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
