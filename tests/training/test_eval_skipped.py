"""A job asking for held-out evaluation on a file too small to hold any out says so in an event (it used to skip
evaluation silently: no eval_reward and no word why)."""

from __future__ import annotations

from pathlib import Path

import torch

from contract.spec import JobSpec
from workers.datasets import generate_rows, write_jsonl
from workers.local import train_local

torch.set_num_threads(1)


def test_small_dataset_records_why_eval_is_skipped(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "small.jsonl"
    write_jsonl(generate_rows("arithmetic", 8, 0), data)  # 8 rows <= eval_prompts 64: nothing is held out
    spec = JobSpec.model_validate({
        "model": str(tiny_model_dir), "dataset": {"path": str(data)},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
        "algorithm": {"name": "grpo", "group_size": 2}, "generation": {"max_tokens": 4, "batch_size": 4},
        "training": {"iterations": 1, "prompts_per_iteration": 2, "micro_batch_size": 4},
    })
    result = train_local(spec, tmp_path / "out", eval_every=1)
    skipped = [e for e in result.events if e["kind"] == "eval_skipped"]
    assert len(skipped) == 1, result.events
    assert "8 row(s)" in skipped[0]["message"] and "dataset.eval_prompts (64)" in skipped[0]["message"]
    assert all("eval_reward" not in record.metrics for record in result.records)
