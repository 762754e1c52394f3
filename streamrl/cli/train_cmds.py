"""`streamrl train-local` and `streamrl sft`: RL and the SFT warm start in this process, no services.

    streamrl sft --model models/tiny1m --out models/tiny1m-sft --task arithmetic --param digits=1 --steps 100
    streamrl train-local spec.yaml --out runs/local [--set training.iterations=50] [--param digits=1] [--resume]

train-local reads a JobSpec file whose `model` is a local HF directory and prints one line per iteration (training
reward, loss, KL, entropy, clip fraction, grad norm, lr, held-out reward every --eval-every iterations, stage times).
Checkpoints go to <out>/checkpoints/iter_NNNNNN every `checkpoint.interval` iterations; --resume continues from the
newest one. Heavy imports (torch, transformers) happen inside the commands so the rest of the CLI stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from streamrl.cli.common import parse_params
from streamrl.cli.errors import CLIError
from streamrl.cli.jobs import load_spec


def train_local_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="JobSpec YAML/JSON; `model` is a local HF directory"),
    out: Path = typer.Option(Path("runs/local"), help="output directory (weights, checkpoints)"),
    device: str = typer.Option("cpu", help="torch device for the trainer and the hf engine"),
    eval_every: int = typer.Option(5, min=0, help="held-out evaluation every N iterations (0: never)"),
    resume: bool = typer.Option(False, help="continue from the newest checkpoint under <out>/checkpoints"),
    overrides: list[str] = typer.Option([], "--set", help="override a spec field: training.iterations=50"),
    param: list[str] = typer.Option([], help="built-in task parameter KEY=VALUE, e.g. digits=1"),
    threads: int = typer.Option(0, min=0, help="torch threads (0: torch's default)"),
) -> None:
    """Run generate -> reward -> train -> sync loops in one process and print a line per iteration."""
    from contract.spec import JobSpec

    spec = JobSpec.model_validate(load_spec(spec_path, overrides=overrides))
    from workers.lean_imports import skip_sklearn_in_transformers

    skip_sklearn_in_transformers()
    import torch
    from transformers.utils import logging as hf_logging

    from workers.local import train_local

    hf_logging.disable_progress_bar()  # one line per iteration, no "Writing model shards" bars
    if threads:
        torch.set_num_threads(threads)
    result = train_local(spec, out, device=device, eval_every=eval_every, resume=resume,
                         dataset_params=parse_params(param), on_iteration=lambda r: typer.echo(r.line()))
    curve = " ".join(f"{it}:{value:.3f}" for it, value in result.eval_curve)
    typer.echo(f"done in {result.seconds:.1f}s; held-out reward {curve or '-'}; checkpoints in {result.checkpoint_dir}")


def sft_command(
    model: Path = typer.Option(..., help="HF model directory to start from (e.g. from `streamrl make-model`)"),
    out: Path = typer.Option(..., help="directory to write the fine-tuned model to"),
    task: str = typer.Option("arithmetic", help="built-in task to draw (prompt, answer) rows from"),
    data: Path | None = typer.Option(None, help="JSONL with prompt/answer rows instead of a built-in task"),
    rows: int = typer.Option(4000, min=1, help="rows to generate for a built-in task"),
    param: list[str] = typer.Option([], help="built-in task parameter KEY=VALUE, e.g. digits=1"),
    steps: int = typer.Option(300, min=1),
    batch_size: int = typer.Option(64, min=1),
    lr: float = typer.Option(3e-3, min=0.0),
    seed: int = typer.Option(0),
    time_budget: float | None = typer.Option(None, help="stop after this many seconds"),
    device: str = typer.Option("cpu"),
) -> None:
    """Supervised warm start (answer tokens only) so RL starts from a model that emits the task's format."""
    if not (model / "config.json").exists():
        raise CLIError(f"{model} is not a model directory (no config.json)")
    from transformers.utils import logging as hf_logging

    from workers.datasets import generate_rows, read_jsonl
    from workers.training.sft import sft_warm_start

    hf_logging.disable_progress_bar()

    examples = read_jsonl(data) if data is not None else generate_rows(task, rows, seed, **parse_params(param))
    result = sft_warm_start(model, out, examples, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                            device=device, time_budget_s=time_budget, log_every=50)
    typer.echo(f"sft: {result.steps} steps, final loss {result.final_loss:.4f}, {result.seconds:.1f}s -> {out}")


def register(app: typer.Typer) -> None:
    app.command("train-local")(train_local_command)
    app.command("sft")(sft_command)
