"""A job in each mode runs to completion on real Celery workers; samples trained == prompts x group size, no dups."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [pytest.mark.integration]

ITERATIONS, PROMPTS, GROUP = 3, 4, 4


@pytest.mark.parametrize("mode", ["sync", "async", "colocated"])
def test_job_runs_to_completion(platform, mode: str) -> None:
    job_id = platform.submit(mode=mode, training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS},
                             algorithm={"group_size": GROUP})
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.error is None
    rows = platform.iterations(job_id)
    assert len(rows) == ITERATIONS
    assert sum(r["samples"] for r in rows) == ITERATIONS * PROMPTS * GROUP
    # the spec left the budget and precision to the platform: the driver chose them and said so
    [defaults] = [e for e in platform.events(job_id) if e.startswith("training defaults:")]
    assert "token budget" in defaults and "precision float32" in defaults, defaults
    for row in rows:
        for key in ("gen_seconds", "train_seconds", "samples_per_s", "reward_mean", "len_p50", "weight_sync_seconds"):
            assert key in row, key
    if mode != "colocated":
        consumed = platform.consumed(job_id)  # ids are unique by construction: a set equal in size == no dups
        assert len(consumed) == ITERATIONS * PROMPTS * GROUP
        assert max(r["staleness_mean"] for r in rows) <= (1 if mode == "async" else 0)


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")
def test_task_processes_load_models_without_sklearn(platform) -> None:
    """workers/lean_imports.py, through the worker's signal: the task processes that ran a job loaded torch and
    transformers, not scikit-learn (installed here as mlflow's dependency; transformers would import it)."""
    job_id = platform.submit(mode="sync", training={"iterations": 1, "prompts_per_iteration": 2})
    assert platform.wait_done(job_id, timeout_s=300).error is None
    for pool in ("generation", "training"):
        maps = platform.task_process_maps(pool)
        assert any("/torch/lib/" in text for text in maps), f"no {pool} task process loaded torch"
        assert not any("/sklearn/" in text for text in maps), f"a {pool} task process loaded scikit-learn"


def test_async_generates_ahead_of_training(platform) -> None:
    """Async really overlaps: samples of iteration i + 1 come from weights older than i + 1, i.e. they were generated
    before training of iteration i ended (sync would show staleness 0 everywhere); k = 3 lets them lag further.

    Generation must be the faster side to run ahead, on a loaded machine too: each instance decodes its share of an
    iteration in one batch of 2 tokens, while the trainer takes one micro-step per sample (32 forward and backward
    passes an iteration), so the trainer is the side that waits on nothing whatever the load."""
    shape = {"algorithm": {"group_size": 8}, "generation": {"batch_size": 16, "max_tokens": 2}}
    training = {"prompts_per_iteration": 4, "micro_batch_size": 1, "max_tokens_per_micro_batch": 0}
    one = platform.submit(mode="async", max_staleness=1, training={**training, "iterations": 4}, **shape)
    three = platform.submit(mode="async", max_staleness=3, training={**training, "iterations": 6}, **shape)
    rows_one = platform.wait_done(one, 300) and platform.iterations(one)
    rows_three = platform.wait_done(three, 300) and platform.iterations(three)
    assert max(r["staleness_mean"] for r in rows_one) > 0 and max(r["staleness_max"] for r in rows_one) <= 1
    # some sample lagged past one version: generated at least two versions before the trainer reached its iteration
    assert max(r["staleness_max"] for r in rows_three) > 1 and max(r["staleness_max"] for r in rows_three) <= 3, \
        [(r["staleness_mean"], r["staleness_max"], r["gen_seconds"], r["train_seconds"]) for r in rows_three]


def test_skew_aware_job_profiles_and_dispatches(platform) -> None:
    job_id = platform.submit(mode="sync", dispatch={"policy": "skew_aware"},
                             dataset={"builtin": "long_tail", "num_prompts": 16, "eval_prompts": 4},
                             training={"iterations": 3, "prompts_per_iteration": 4, "eval_every": 3})
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.ptl_profile and len(job.ptl_profile["points"]) >= 2  # measured by the first instance
    rows = platform.iterations(job_id)
    assert len(rows) == 3 and all("recall_top20" in r for r in rows)
    assert 0.0 <= rows[-1]["eval_reward"] <= 1.0 and rows[-1]["eval_version"] == 3  # held-out curve at v3
