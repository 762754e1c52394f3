"""`streamrl make-model` and `streamrl make-dataset`: tiny local models and built-in task files, no model hub.

    streamrl make-model --preset tiny-1m --out models/tiny1m [--seed 0] [--force]
    streamrl make-model --preset chat-qwen2-1m --out models/qwen-chat   # BPE tokenizer + chat template
    streamrl make-dataset --task long_tail --n 1000 --out prompts.jsonl [--seed 0] [--param max_k=32]

Heavy imports (torch, transformers) happen inside the commands, so the rest of the CLI stays fast. The SFT warm start
(workers/training/sft.py) is a separate step on the directory written here.
"""

from __future__ import annotations

from pathlib import Path

import typer

from streamrl.cli.common import parse_params
from streamrl.cli.errors import CLIError

# the presets of workers/models/tiny.py offered here (tests/models/test_tiny_models.py checks they exist there)
PRESET_NAMES = ("tiny-1m", "tiny-5m", "tiny-15m", "chat-llama-1m", "chat-qwen2-1m", "chat-llama-5m")
TASK_NAMES = ("arithmetic", "long_tail")


def make_model(
    preset: str = typer.Option("tiny-1m", help=f"one of {', '.join(PRESET_NAMES)}"),
    out: Path = typer.Option(..., help="directory to write (HF format: config, safetensors, tokenizer)"),
    seed: int = typer.Option(0, help="weight initialisation seed"),
    force: bool = typer.Option(False, help="overwrite a directory that already holds a model"),
) -> None:
    """Build a randomly initialised tiny model: tiny-* are Llama with a character tokenizer; chat-* are Llama or Qwen2
    with a byte-level BPE tokenizer, a chat template and two EOS ids (the path real checkpoints take)."""
    if preset not in PRESET_NAMES:
        raise CLIError(f"unknown preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}")
    if (out / "config.json").exists() and not force:
        raise CLIError(f"{out} already holds a model (pass --force to overwrite)")
    from transformers import AutoModelForCausalLM

    from workers.models import build_tiny_model, count_parameters

    path = build_tiny_model(preset, out, seed=seed)
    params = count_parameters(AutoModelForCausalLM.from_pretrained(path))
    typer.echo(f"wrote {preset} ({params / 1e6:.2f}M parameters) to {path}")


def make_dataset(
    task: str = typer.Option(..., help=f"built-in task: {', '.join(TASK_NAMES)}"),
    n: int = typer.Option(1000, min=1, help="number of rows"),
    out: Path = typer.Option(..., help="JSONL file to write"),
    seed: int = typer.Option(0),
    split: str = typer.Option("train", help="train or eval (different prompts, different prompt ids)"),
    param: list[str] = typer.Option([], help="task parameter KEY=VALUE, e.g. digits=3, ops=+-*, max_k=32"),
) -> None:
    """Write a built-in task's prompts to a JSONL file (upload it with `streamrl datasets upload`)."""
    from workers.datasets import generate_rows, write_jsonl

    if task not in TASK_NAMES:
        raise CLIError(f"unknown task {task!r}; choose one of {', '.join(TASK_NAMES)}")
    try:
        rows = generate_rows(task, n, seed, split=split, **parse_params(param))
    except (TypeError, ValueError) as exc:
        raise CLIError(f"bad task parameters for {task}: {exc}") from exc
    count = write_jsonl(rows, out)
    typer.echo(f"wrote {count} {task} rows to {out}")


def register(app: typer.Typer) -> None:
    app.command("make-model")(make_model)
    app.command("make-dataset")(make_dataset)
