"""`streamrl models register | upload | get | list | download | delete | hub-token`: models a job may load.

    streamrl models register qwen models/qwen-chat                 # a directory on the server
    streamrl models register qwen --hub Qwen/Qwen2.5-0.5B-Instruct --revision main [--wait]
    streamrl models upload qwen ./my-checkpoint                    # a local directory (packed) or an archive
    streamrl models hub-token set hf_...                           # the team's Hub token (stored encrypted)
    streamrl models download qwen --version 2 -o ./qwen-v2         # a version's directory (HF layout)
    streamrl models delete qwen --version 1                        # one version (refused while a job uses it)

Registering or uploading a name the team already has adds its next version; a job uses the newest version of the
name it gives, and keeps that version to its end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError
from streamrl.cli.tar_download import download_tar

models_app = typer.Typer(help="Registered models of the current team.", no_args_is_help=True)
token_app = typer.Typer(help="The team's Hugging Face token (gated or private Hub models).", no_args_is_help=True)


def describe(model: dict[str, Any]) -> str:
    line = f"model {model.get('id')} {model.get('name')!r} v{model.get('version', 1)}: {model.get('state')}"
    card = model.get("card") or {}
    if model.get("state") == "ready" and card:
        params = card.get("parameters")
        line += (f" - {card.get('architecture')}, {params / 1e6:.2f}M parameters" if params else
                 f" - {card.get('architecture')}")
        template = "yes" if card.get("chat_template") else "no"
        line += (f", {card.get('dtype')}, context {card.get('context_length')}, vocab {card.get('vocab_size')}, "
                 f"chat template {template}, {card.get('disk_bytes', 0) / 1e6:.1f} MB")
    elif model.get("state") == "downloading":
        progress = model.get("progress") or {}
        total = progress.get("total_bytes") or 0
        line += f" ({progress.get('done_bytes', 0) / 1e6:.1f} of {total / 1e6:.1f} MB)" if total else ""
    elif model.get("state") == "failed":
        line += f": {model.get('error')}"
    return line


@models_app.command("register")
def register_model(
    ctx: typer.Context,
    name: str,
    path: str | None = typer.Argument(None, help="model directory on the server (artifact dir or allow-listed root)"),
    hub: str | None = typer.Option(None, help="Hugging Face model id to download once (owner/name)"),
    revision: str = typer.Option("main", help="branch, tag or commit of --hub"),
    wait: bool = typer.Option(False, help="with --hub: wait until the download is ready or failed"),
) -> None:
    """Register a server directory (validated now) or a Hub model (downloaded in the background)."""
    if (path is None) == (hub is None):
        raise CLIError("give exactly one of PATH (a server directory) or --hub (a Hub model id)")
    with client(ctx) as api:
        model = api.register_model(name, path, hub_id=hub, revision=revision if hub else None)
        while wait and model.get("state") == "downloading":
            time.sleep(1.0)
            model = api.get_model(int(model["id"]))
    if not emit_json(ctx, model):
        typer.echo(describe(model))
    if model.get("state") == "failed":
        raise typer.Exit(1)


@models_app.command("upload")
def upload_model(ctx: typer.Context, name: str, source: Path = typer.Argument(..., exists=True)) -> None:
    """Upload a model directory (packed as .tar.gz) or an archive (.tar.gz, .tar, .zip)."""
    with client(ctx) as api:
        model = api.upload_model(source, name)
    if not emit_json(ctx, model):
        typer.echo(describe(model))


@models_app.command("get")
def get_model(ctx: typer.Context, model_id: int) -> None:
    """One model: its state and card."""
    with client(ctx) as api:
        model = api.get_model(model_id)
    if not emit_json(ctx, model):
        typer.echo(describe(model))


@models_app.command("list")
def list_models(ctx: typer.Context) -> None:
    """Models registered by the current team."""
    with client(ctx) as api:
        page = api.list_models()
    if not emit_json(ctx, page):
        rows = [{**m, "architecture": (m.get("card") or {}).get("architecture", "")} for m in page.get("data", [])]
        print_table(rows, ["id", "name", "version", "state", "source", "architecture", "path", "created_at"])


def _version_id(models: list[dict[str, Any]], ref: str, version: int | None) -> int:
    """The id of the version `ref` names: a model id, or a name (with --version unless it has one version)."""
    if ref.isdigit() and version is None:
        return int(ref)
    versions = sorted((m for m in models if m.get("name") == ref), key=lambda m: int(m.get("version", 1)))
    if not versions:
        raise CLIError(f"no model named {ref!r} in this team (streamrl models list)")
    if version is None:
        if len(versions) > 1:
            listed = ", ".join(f"v{m.get('version')} (id {m.get('id')})" for m in versions)
            raise CLIError(f"{ref!r} has {len(versions)} versions: {listed}; choose one with --version")
        return int(versions[0]["id"])
    for model in versions:
        if int(model.get("version", 1)) == version:
            return int(model["id"])
    raise CLIError(f"{ref!r} has no version {version} (it has {', '.join(str(m.get('version')) for m in versions)})")


@models_app.command("download")
def download_model(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="a model id, or a name (with --version when it has several)"),
    version: int | None = typer.Option(None, min=1, help="which version of the named model"),
    out: Path | None = typer.Option(None, "--out", "-o", help="target directory (default ./<name>-v<version>)"),
    force: bool = typer.Option(False, "--force", help="replace the target directory if it exists"),
) -> None:
    """Download a model version (uploaded, Hub-downloaded or a server directory) and unpack it as a Hugging Face
    directory; a partial download leaves nothing behind."""
    with client(ctx) as api:
        model_id = _version_id(api.list_models().get("data", []), model, version)
        row = api.get_model(model_id)
        name = f"{row['name']}-v{row.get('version', 1)}"
        target = out or Path(name)
        if target.exists() and not force:
            raise CLIError(f"{target} exists; pass --force to replace it or --out to choose another directory")
        size = download_tar(api, f"/models/{model_id}/export.tar", name, target)
    if not emit_json(ctx, {"model_id": model_id, "path": str(target), "bytes": size}):
        typer.echo(f"model {model_id} {row['name']!r} v{row.get('version', 1)}: {size / 1e6:.1f} MB in {target}")


@models_app.command("delete")
def delete_model(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="a model id, or a name (with --version when it has several)"),
    version: int | None = typer.Option(None, min=1, help="which version of the named model"),
) -> None:
    """Delete one model version; refused (409) while an unfinished job uses it. Uploaded and downloaded files go
    with it, a registered server directory stays."""
    with client(ctx) as api:
        model_id = _version_id(api.list_models().get("data", []), model, version)
        api.delete_model(model_id)
    if not emit_json(ctx, {"deleted": model_id}):
        typer.echo(f"deleted model {model_id}")


@token_app.command("set")
def set_token(ctx: typer.Context, token: str) -> None:
    """Store the team's Hub token (admin); it is kept encrypted and never shown again."""
    with client(ctx) as api:
        answer = api.set_hub_token(token)
    if not emit_json(ctx, answer):
        typer.echo("hub token set")


@token_app.command("clear")
def clear_token(ctx: typer.Context) -> None:
    """Forget the team's Hub token (admin)."""
    with client(ctx) as api:
        answer = api.set_hub_token(None)
    if not emit_json(ctx, answer):
        typer.echo("hub token cleared")


def register(app: typer.Typer) -> None:
    models_app.add_typer(token_app, name="hub-token")
    app.add_typer(models_app, name="models")
