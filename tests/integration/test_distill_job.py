"""An on-policy distillation job on real workers (algorithm distill): the generation instance loads the teacher (the
team's registered model, a tiny model fine-tuned here on the job's task) next to the student, scores every sampled
token with it (and returns its top-k at every position), and the trainer's per-token advantage is the negative reverse
KL (plus the top-k term): the recorded reverse_kl and topk_kl fall and the held-out reward (answers that are a
number, which the teacher gives and the random student rarely does) rises."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from runtime_platform import Platform

from backend.db import Model
from workers.datasets import generate_rows
from workers.training.sft import sft_warm_start

pytestmark = [pytest.mark.integration, pytest.mark.slow]
NUMBER = {"type": "regex", "params": {"pattern": "^[0-9]+$"}}


@pytest.fixture
def teacher(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """The student fine-tuned on the job's task (built before the platform's workers start, one torch thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return sft_warm_start(tiny_model_dir, tmp_path / "teacher", generate_rows("arithmetic", 256, 1), steps=30,
                              batch_size=32, lr=3e-3).model_dir
    finally:
        torch.set_num_threads(threads)


def test_a_distillation_job_learns_from_its_teacher(teacher: Path, platform: Platform) -> None:
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="teacher", path=str(teacher),
                          created_by_id=platform.user.id))
    job_id = platform.submit(mode="sync", reward=NUMBER, algorithm={"name": "distill", "teacher": "teacher",
                                                                     "group_size": 4},
                             dataset={"builtin": "arithmetic", "num_prompts": 64, "eval_prompts": 32},
                             generation={"instances": 1, "batch_size": 32, "max_tokens": 4},
                             training={"iterations": 7, "prompts_per_iteration": 8, "micro_batch_size": 32,
                                       "lr": 1e-2, "eval_every": 3})
    platform.wait_done(job_id, timeout_s=600)
    rows = platform.iterations(job_id)
    assert len(rows) == 7, rows
    kl = [row["reverse_kl"] for row in rows]
    assert sum(kl[-3:]) / 3 < 0.7 * sum(kl[:3]) / 3, kl
    # the default teacher_topk: the teacher's top-k crossed the sample stream, and the top-k KL falls too
    topk = [row.get("topk_kl") for row in rows]
    assert all(value is not None and value > 0 for value in topk), topk
    assert sum(topk[-3:]) / 3 < sum(topk[:3]) / 3, topk
    evals = [row["eval_reward"] for row in rows if row.get("eval_reward") is not None]  # after 3, 6 and 7 steps
    assert len(evals) >= 2 and evals[-1] > evals[0] and evals[-1] >= 0.3, (evals, kl)
