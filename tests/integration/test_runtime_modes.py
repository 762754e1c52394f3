"""A job in each mode runs to completion on real Celery workers; samples trained == prompts x group size, no dups."""

from __future__ import annotations

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
    for row in rows:
        for key in ("gen_seconds", "train_seconds", "samples_per_s", "reward_mean", "len_p50", "weight_sync_seconds"):
            assert key in row, key
    if mode != "colocated":
        consumed = platform.consumed(job_id)  # ids are unique by construction: a set equal in size == no dups
        assert len(consumed) == ITERATIONS * PROMPTS * GROUP
        assert max(r["staleness_mean"] for r in rows) <= (1 if mode == "async" else 0)
