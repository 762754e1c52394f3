"""An async job with `training.weight_sync: p2p` on real workers: every instance joins the trainer's p2p weight sync,
generates with the versions it receives (never through the shared store), and the job completes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from backend.db import JobSample

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITERATIONS, PROMPTS, GROUP = 4, 2, 4


@pytest.mark.parametrize("weight_sync", ["p2p", "auto"])
def test_async_job_with_p2p_weight_sync_completes(platform: Any, weight_sync: str) -> None:
    """`auto` on one host: every instance reaches the trainer, so it is p2p too."""
    job_id = platform.submit(
        mode="async",
        max_staleness=1,
        generation={"instances": 2},
        training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS, "weight_sync": weight_sync},
        algorithm={"group_size": GROUP},
    )
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.error is None
    rows = platform.iterations(job_id)
    assert len(rows) == ITERATIONS and sum(r["samples"] for r in rows) == ITERATIONS * PROMPTS * GROUP
    assert [r["policy_version"] for r in rows] == list(range(1, ITERATIONS + 1))
    assert all(r["weight_sync_seconds"] > 0 for r in rows) and max(r["staleness_mean"] for r in rows) <= 1
    with platform.backend.session() as session:
        used = [
            (s.instance_id, s.policy_version)
            for s in session.scalars(select(JobSample).where(JobSample.job_id == job_id))
        ]
    # iteration i's requests need weights >= i - max_staleness: the last one's came from versions published during
    # the run, which reached the instances only over p2p
    assert max(version for _, version in used) >= ITERATIONS - 2, used  # the version each sample reports
    weights = Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id) / "weights"
    joined = [e for e in platform.events(job_id) if "joined p2p weight sync" in e]
    assert {iid for iid, _ in used} <= {e.split()[1] for e in joined}, joined  # every producing instance joined
    assert (weights.parent / "checkpoints").is_dir()  # the job's directory (its final checkpoint is there)
    assert not list(weights.glob("v*")), "p2p jobs do not write weights to the shared store"
