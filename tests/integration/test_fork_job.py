"""A fork (POST /jobs/{id}/fork; backend/services/forks.py) starts from its parent's checkpoint: the same weights at
its first iteration (the same samples and loss as the parent's iteration after the checkpoint: the loss is computed
before the optimizer step), its own learning rate for the step, iterations counted on from the checkpoint, and its
lineage recorded."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.db import JobSample
from backend.db.models import Job, Team, User
from backend.services import forks

pytestmark = [pytest.mark.integration]
SHAPE = {"training": {"iterations": 3, "prompts_per_iteration": 2, "micro_batch_size": 4, "lr": 1e-3},
         "generation": {"instances": 1, "batch_size": 16, "max_tokens": 8}, "checkpoint": {"interval": 2},
         "reward": {"type": "regex", "params": {"pattern": "[0-5]"}}}  # rewards that differ: real gradients


def _samples(platform, job_id: int, iteration: int) -> dict[str, str]:
    with platform.backend.session() as session:
        rows = session.scalars(select(JobSample).where(JobSample.job_id == job_id, JobSample.iteration == iteration))
        return {row.sample_id: row.prompt + "|" + row.response for row in rows}


def test_a_fork_starts_from_the_checkpoint_weights_with_its_own_lr(platform) -> None:
    parent_id = platform.submit(name="parent", **SHAPE)
    platform.wait_done(parent_id, timeout_s=300)
    artifacts = platform.backend.settings.artifacts
    with platform.backend.session() as session:
        parent = session.get(Job, parent_id)
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        assert parent is not None and team is not None and user is not None
        source = forks.parent_checkpoint(session, parent, 2, artifacts)
        spec = forks.fork_spec(parent, 2, {"training.lr": 1e-5})
        fork_id = forks.fork_job(session=session, team=team, user=user, parent=parent, iteration=2, spec=spec,
                                 source=source, changed=["training.lr"], artifacts=artifacts).id
    fork = platform.wait_done(fork_id, timeout_s=300)
    assert (fork.parent_job_id, fork.parent_iteration, fork.current_iteration) == (parent_id, 2, 3)
    assert any("resumed from checkpoint at iteration 2" in event for event in platform.events(fork_id))
    parent_rows, fork_rows = platform.iterations(parent_id), platform.iterations(fork_id)
    assert len(fork_rows) == 1  # iteration 3 only: counted on from the checkpoint
    assert parent_rows[2]["grad_norm"] > 0  # a real step: weights that move
    # iteration 2's weights: the same samples, the same loss (before the step) as the parent's iteration 3
    assert _samples(platform, fork_id, 3) == _samples(platform, parent_id, 3) != {}
    assert fork_rows[0]["loss"] == pytest.approx(parent_rows[2]["loss"], rel=1e-6, abs=1e-9)
    assert fork_rows[0]["lr"] == pytest.approx(parent_rows[2]["lr"] * 1e-2, rel=1e-6)  # its own learning rate
    # ... and a different step from there
    parent_final = (artifacts / "jobs" / str(parent_id) / "checkpoints" / "iter_000003" / "model.safetensors")
    fork_final = (artifacts / "jobs" / str(fork_id) / "checkpoints" / "iter_000003" / "model.safetensors")
    assert parent_final.read_bytes() != fork_final.read_bytes()
