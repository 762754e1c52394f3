"""Prompt datasets: built-in task generators (`arithmetic`, `long_tail`), JSONL reading/writing, `load_dataset`.

Rows are dicts with at least `prompt` (text, or a list of chat messages: rows in OpenAI `messages` form are
normalised by contract/prompt_rows.py) and `prompt_id` (str, stable: the same spec and seed always give the same ids,
which the length ranker keys on); `answer` and any other keys go to the reward as metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from contract.prompt_rows import RowError, normalize_row
from contract.spec import DatasetSpec
from workers.datasets import arithmetic, long_tail

BUILTIN_TASKS: dict[str, Callable[..., list[dict]]] = {
    "arithmetic": arithmetic.generate_rows,
    "long_tail": long_tail.generate_rows,
}
SPLITS = ("train", "eval")


def generate_rows(task: str, n: int, seed: int = 0, **params: Any) -> list[dict]:
    if task not in BUILTIN_TASKS:
        raise ValueError(f"unknown built-in task {task!r}; choose one of {sorted(BUILTIN_TASKS)}")
    return BUILTIN_TASKS[task](n, seed, **params)


def write_jsonl(rows: Iterable[dict], path: str | Path) -> int:
    """Write rows one JSON object per line; return how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a prompt JSONL file (rows normalised: `prompt` text or chat messages); errors name the line and the
    column. Rows without `prompt_id` get `<file stem>-<line>`."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            try:
                row = normalize_row(row)
            except RowError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from e
            row.setdefault("prompt_id", f"{Path(path).stem}-{lineno}")
            rows.append(row)
    return rows


def load_dataset(spec: DatasetSpec, *, split: str = "train", seed: int = 0, **params: Any) -> list[dict]:
    """Rows for a built-in or path spec. `split="eval"` gives `spec.eval_prompts` held-out rows.

    For a path spec the last `eval_prompts` rows are the eval split (when the file is larger than that); uploaded
    datasets (`spec.id`) are read by the runtime from the path the control plane stored, then passed here as a path.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} (got {split!r})")
    if spec.builtin is not None:
        n = spec.num_prompts if split == "train" else spec.eval_prompts
        return generate_rows(spec.builtin, n, seed, split=split, **params)
    if spec.path is not None:
        rows = read_jsonl(spec.path)
        n_eval = spec.eval_prompts if len(rows) > spec.eval_prompts else 0
        return rows[: len(rows) - n_eval] if split == "train" else rows[len(rows) - n_eval :]
    raise ValueError("dataset id specs are resolved by the control plane: pass the stored file as `path`")


__all__ = ["BUILTIN_TASKS", "generate_rows", "load_dataset", "read_jsonl", "write_jsonl"]
