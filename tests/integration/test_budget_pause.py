"""A real job (Celery workers, controller loop) and its usage: the figures add up to its recorded iteration times; a
job over `limits.max_device_seconds` pauses at a checkpoint with an event naming the limit and resumes, iterations
1..N exactly once, when the limit is raised."""

from __future__ import annotations

from typing import Any

import pytest
from runtime_platform import wait_until
from sqlalchemy import select

from backend.db import Checkpoint, JobEvent, JobStatus
from backend.db.models import Job
from backend.services.budgets import set_job_limits
from backend.services.usage import job_totals
from contract.spec_operations import LimitsSpec

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITERATIONS = 12


def _events(platform: Any, job_id: int, kind: str) -> list[JobEvent]:
    with platform.backend.session() as session:
        return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == kind)))


def test_a_job_over_its_device_seconds_pauses_at_a_checkpoint_and_resumes_when_raised(platform: Any) -> None:
    # any recorded iteration is over 0.001 device-seconds: the job pauses after its first one. The controller sees
    # that on its next pass (every 0.5 s, slower under load), so the job has iterations enough not to end first
    # (with 4, a tiny job once finished before the pause reached it)
    job_id = platform.submit(name="budgeted", training={"iterations": ITERATIONS},
                             limits={"max_device_seconds": 0.001})
    platform.wait_status(job_id, {JobStatus.paused}, timeout_s=300)
    exceeded = _events(platform, job_id, "budget_exceeded")
    assert len(exceeded) == 1 and "limits.max_device_seconds" in exceeded[0].message
    assert exceeded[0].data is not None and exceeded[0].data["budget"] == "limits.max_device_seconds"
    # the driver takes a checkpoint at its last optimizer step and waits
    paused_at = wait_until(lambda: [e.data["iteration"] for e in _events(platform, job_id, "checkpoint")
                                    if e.data and e.data.get("paused")], 120, "the pause's checkpoint",
                           logs=platform.logs_tail)[0]
    with platform.backend.session() as session:
        stored = session.scalars(select(Checkpoint.iteration).where(Checkpoint.job_id == job_id)).all()
    assert paused_at >= 1 and paused_at in stored
    assert platform.job(job_id).status == JobStatus.paused  # still waiting: nothing resumes it on its own

    with platform.backend.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        set_job_limits(session=session, job=job, limits=LimitsSpec(max_device_seconds=1e9))
    platform.wait_done(job_id, timeout_s=300)
    assert _events(platform, job_id, "budget_resumed")
    rows = platform.iterations(job_id)
    assert len(rows) == ITERATIONS  # iterations 1..N, each once

    # usage = the recorded iterations' times: 1 training device, each live instance one generation device
    with platform.backend.session() as session:
        used = job_totals(session, [job_id])[job_id]
    assert used.training_device_seconds == pytest.approx(sum(r["iteration_seconds"] for r in rows))
    assert used.generation_device_seconds == pytest.approx(
        sum(r["iteration_seconds"] * r["instances_live"] for r in rows))
    assert used.generation_device_seconds > 0
    assert used.tokens_generated == sum(int(r["tokens_generated"]) for r in rows) > 0
    assert used.tokens_trained == sum(int(r["tokens_trained"]) for r in rows) > used.tokens_generated
