"""`streamrl checkpoints list | download`: a job's saved checkpoints, fetched as the HF directory they were saved as."""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import typer

from backend.client.client import API_PREFIX
from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError

FORMS = ("checkpoint", "merged", "adapter")  # backend/services/exports.py CheckpointForm
checkpoints_app = typer.Typer(help="Checkpoints of a job: list, download (HF directory).", no_args_is_help=True)


class _ChunkReader:
    """A read-only file over an iterator of byte chunks (what `tarfile` stream mode reads from)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buffer = chunks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buffer += chunk
        cut = len(self._buffer) if size < 0 else size
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out


@checkpoints_app.command("list")
def list_checkpoints(ctx: typer.Context, job_id: int) -> None:
    """Checkpoints saved by a job, oldest first: the best (checkpoint.select best) and each suite's mean."""
    with client(ctx) as api:
        page = api.job_checkpoints(job_id)
    if not emit_json(ctx, page):
        rows = [{**c, "best": "best" if c.get("best") else "",
                 "scores": " ".join(f"{suite}={values.get('mean', 0):.4g}"
                                    for suite, values in (c.get("scores") or {}).items())}
                for c in page.get("data", [])]
        print_table(rows, ["iteration", "best", "scores", "path", "created_at"], empty="(no checkpoints)")


@checkpoints_app.command("download")
def download(
    ctx: typer.Context,
    job_id: int,
    iteration: int | None = typer.Option(None, "--iteration", "-i", help="default: the newest checkpoint"),
    out: Path | None = typer.Option(None, "--out", "-o", help="target directory (default ./job-<id>-iter-<n>)"),
    force: bool = typer.Option(False, "--force", help="replace the target directory if it exists"),
    form: str = typer.Option("checkpoint", "--form", help="checkpoint (everything, resumable), merged (the model "
                             "alone, HF layout; a LoRA job's merged with its adapter) or adapter (a LoRA job's "
                             "adapter alone, PEFT layout)"),
) -> None:
    """Download a checkpoint and unpack it as a Hugging Face directory (AutoModel.from_pretrained loads it; an
    adapter: PeftModel.from_pretrained)."""
    if form not in FORMS:
        raise CLIError(f"--form must be one of {', '.join(FORMS)} (got {form!r})")
    with client(ctx) as api:
        saved = [row["iteration"] for row in api.job_checkpoints(job_id).get("data", [])]
        if not saved:
            raise CLIError(f"job {job_id} has saved no checkpoint yet")
        chosen = saved[-1] if iteration is None else iteration
        if chosen not in saved:
            raise CLIError(f"job {job_id} has no checkpoint at iteration {chosen}; saved: {saved}")
        name = f"job-{job_id}-iter-{chosen}" + ("" if form == "checkpoint" else f"-{form}")
        target = out or Path(name)
        if target.exists() and not force:
            raise CLIError(f"{target} exists; pass --force to replace it or --out to choose another directory")
        url = f"{api.base_url}{API_PREFIX}/jobs/{job_id}/export/checkpoints/{chosen}.tar?form={form}"
        headers = {"Authorization": f"Bearer {api.token}"} if api.token else {}
        staging = target.with_name(f".{target.name}.partial")
        shutil.rmtree(staging, ignore_errors=True)
        with httpx.stream("GET", url, headers=headers, timeout=60) as response:
            if response.status_code != 200:
                raise CLIError(f"download failed ({response.status_code}): {response.read().decode(errors='replace')}")
            with tarfile.open(fileobj=_ChunkReader(response.iter_bytes()), mode="r|") as archive:  # type: ignore[call-overload]
                archive.extractall(staging, filter="data")  # refuses absolute paths, .. and links out of staging
    inner = staging / name
    if target.exists():
        shutil.rmtree(target)
    inner.rename(target)
    shutil.rmtree(staging)
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    if not emit_json(ctx, {"job_id": job_id, "iteration": chosen, "form": form, "path": str(target), "bytes": size}):
        typer.echo(f"checkpoint of job {job_id} iteration {chosen} ({form}): {size / 1e6:.1f} MB in {target}")


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoints_app, name="checkpoints")
