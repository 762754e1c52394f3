"""`streamrl checkpoints list | download`: a job's saved checkpoints, fetched as the HF directory they were saved as."""

from __future__ import annotations

from pathlib import Path

import typer

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError
from streamrl.cli.tar_download import download_tar

FORMS = ("checkpoint", "merged", "adapter")  # backend/services/exports.py CheckpointForm
checkpoints_app = typer.Typer(help="Checkpoints of a job: list, download (HF directory).", no_args_is_help=True)


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
        size = download_tar(api, f"/jobs/{job_id}/export/checkpoints/{chosen}.tar?form={form}", name, target)
    if not emit_json(ctx, {"job_id": job_id, "iteration": chosen, "form": form, "path": str(target), "bytes": size}):
        typer.echo(f"checkpoint of job {job_id} iteration {chosen} ({form}): {size / 1e6:.1f} MB in {target}")


def register(app: typer.Typer) -> None:
    app.add_typer(checkpoints_app, name="checkpoints")
