"""One RL core: train-local, a colocated job and a sync job on the platform agree on iteration 1 (same spec, seed).

The same prompts, request ids and sampling seeds give the same samples; the trainer's token-level normalisation
makes the loss independent of how an iteration is cut into micro-batches, so the losses agree within float error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_platform import base_spec
from sqlalchemy import select

from backend.db import JobSample
from contract.spec import JobSpec
from workers.local import train_local

pytestmark = [pytest.mark.integration]
SHAPE = {"training": {"iterations": 1, "prompts_per_iteration": 2, "micro_batch_size": 3, "lr": 1e-3},
         "algorithm": {"group_size": 4}, "generation": {"instances": 1, "batch_size": 16, "max_tokens": 8}}


def platform_first_iteration(platform, mode: str) -> tuple[dict[str, str], float]:
    job_id = platform.submit(mode=mode, **SHAPE)
    platform.wait_done(job_id, timeout_s=300)
    with platform.backend.session() as session:
        rows = session.scalars(select(JobSample).where(JobSample.job_id == job_id, JobSample.iteration == 1))
        samples = {row.sample_id: row.response for row in rows}
    return samples, float(platform.iterations(job_id)[0]["loss"])


def test_train_local_colocated_and_sync_agree(platform, tiny_model_dir: Path, tmp_path: Path) -> None:
    spec = JobSpec.model_validate({**base_spec(**SHAPE), "model": str(tiny_model_dir), "mode": "colocated"})
    local = train_local(spec, tmp_path, eval_every=0)
    local_loss = float(local.records[0].metrics["loss"])
    colocated, colocated_loss = platform_first_iteration(platform, "colocated")
    sync, sync_loss = platform_first_iteration(platform, "sync")
    assert len(colocated) == 8 and set(colocated) == {f"0:{slot}:{k}" for slot in range(2) for k in range(4)}
    assert sync == colocated  # same ids, same responses
    assert colocated_loss == pytest.approx(local_loss, rel=1e-4, abs=1e-6)
    assert sync_loss == pytest.approx(local_loss, rel=1e-4, abs=1e-6)
