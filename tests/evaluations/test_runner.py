"""The evaluation runner in process (workers/runtime/evaluation.py) on a tiny model: every prompt sampled
samples_per_prompt times, scored, summarised with the estimator; seeded, so a rerun gives the same outputs; a model
directory that is gone fails the evaluation with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.evaluation import EvaluationStore, EvaluationTask, pass_at_k

SUITE = {"name": "short", "dataset": {"builtin": "arithmetic", "eval_prompts": 3},
         "reward": {"type": "length_penalty", "params": {"target": 4, "coef": 0.1, "max_penalty": 10.0}},
         "samples_per_prompt": 3, "k": 2, "pass_threshold": -0.2, "sampling": {"temperature": 1.0, "max_tokens": 6}}


class MemoryStore(EvaluationStore):
    def __init__(self, model_dir: str) -> None:
        self.model_dir, self.claimed = model_dir, False
        self.outcome: tuple[str, Any, list[dict[str, Any]]] | None = None

    def claim(self, evaluation_id: int) -> EvaluationTask | None:
        if self.claimed:
            return None
        self.claimed = True
        return EvaluationTask(evaluation_id, 1, self.model_dir, SUITE, None, seed=7)

    def finish(self, evaluation_id: int, summary: dict[str, float], rows: list[dict[str, Any]]) -> None:
        self.outcome = ("done", summary, rows)

    def fail(self, evaluation_id: int, error: str) -> None:
        self.outcome = ("failed", error, [])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.models import build_tiny_model

    return build_tiny_model("tiny-1m", tmp_path_factory.mktemp("runner") / "tiny", seed=0)


def test_runner_scores_every_sample_and_summarises(tiny: Path) -> None:
    from workers.runtime.evaluation import run_evaluation

    first, second = MemoryStore(str(tiny)), MemoryStore(str(tiny))
    run_evaluation(1, first)
    assert run_evaluation(1, first).endswith("not queued (gone or already run)")
    run_evaluation(1, second)
    assert first.outcome is not None
    state, summary, rows = first.outcome
    assert state == "done" and second.outcome is not None
    assert second.outcome[2] == rows  # seeded per sample: the same outputs again
    assert summary["tokens_generated"] > 0 and summary["device_seconds"] > 0  # the team's usage
    assert len(rows) == 3 and all(len(r["outputs"]) == 3 == len(r["scores"]) for r in rows)
    for row in rows:
        assert row["scores"] == [-min(10.0, 0.1 * max(0, len(text) - 4)) for text in row["outputs"]]
    passes = [sum(s >= -0.2 for s in r["scores"]) for r in rows]
    assert summary["pass@k"] == pytest.approx(sum(pass_at_k(3, c, 2) for c in passes) / 3)
    assert summary["mean"] == pytest.approx(sum(sum(r["scores"]) for r in rows) / 9)
    assert (summary["k"], summary["prompts"], summary["samples"]) == (2, 3, 9)


def test_a_model_directory_that_is_gone_fails_the_evaluation(tmp_path: Path) -> None:
    from workers.runtime.evaluation import run_evaluation

    store = MemoryStore(str(tmp_path / "iter_000004"))
    assert run_evaluation(1, store).endswith("failed")
    assert store.outcome is not None and store.outcome[0] == "failed"
    assert "deleted by checkpoint retention" in store.outcome[1]
