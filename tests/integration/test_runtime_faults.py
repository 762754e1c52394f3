"""Faults and elasticity on real workers: kill -9 an instance mid-job; change the target instance count mid-run."""

from __future__ import annotations

import os
import signal
import time

import pytest
from runtime_platform import wait_until
from sqlalchemy import select

from backend.db import GenerationInstance, JobEvent, JobStatus
from backend.services.jobs import cancel_job

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _wait(predicate, timeout_s: float, what: str, platform) -> float:
    """Seconds until `predicate` held."""
    start = time.time()
    wait_until(predicate, timeout_s, what, platform.logs_tail)
    return time.time() - start


def test_kill_9_generation_worker_mid_job_loses_nothing(platform) -> None:
    iterations, prompts, group = 40, 4, 4  # long enough that the kill lands mid-job on an idle machine
    job_id = platform.submit(mode="sync", generation={"instances": 2, "max_tokens": 16},
                             training={"iterations": iterations, "prompts_per_iteration": prompts},
                             algorithm={"group_size": group})
    _wait(lambda: platform.job(job_id).current_iteration >= 1 and len(platform.live_instances(job_id, True)) == 2,
          240, "two running instances and one iteration", platform)
    victim = platform.live_instances(job_id, True)[0]
    info = platform.instance_info(job_id, victim)
    assert info is not None
    os.kill(info["pid"], signal.SIGKILL)  # the Celery child running the instance dies mid-generation
    job = platform.wait_done(job_id, timeout_s=400)
    assert job.error is None
    rows = platform.iterations(job_id)
    assert len(rows) == iterations
    assert sum(r["samples"] for r in rows) == iterations * prompts * group
    assert len(platform.consumed(job_id)) == iterations * prompts * group
    with platform.backend.session() as session:
        status = session.scalar(select(GenerationInstance.status).where(
            GenerationInstance.job_id == job_id, GenerationInstance.instance_id == victim))
        messages = list(session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)))
    assert status == "dead"
    assert any(f"{victim} stopped heart-beating" in m for m in messages), messages


def test_instances_follow_target_changes_mid_run(platform) -> None:
    job_id = platform.submit(mode="async", generation={"instances": 1, "max_tokens": 16},
                             training={"iterations": 200, "prompts_per_iteration": 4})
    _wait(lambda: len(platform.live_instances(job_id, True)) == 1, 240, "the first instance", platform)
    platform.scale(job_id, 2)
    up_s = _wait(lambda: len(platform.live_instances(job_id, True)) == 2, 120, "scale up to 2", platform)
    platform.scale(job_id, 1)
    down_s = _wait(lambda: sorted(platform.statuses(job_id).values()) == ["running", "stopped"], 60,
                   "the surplus instance to finish its requests and exit", platform)
    print(f"scale up followed in {up_s:.1f}s (engine start included), scale down in {down_s:.1f}s")
    with platform.backend.session() as session:
        from backend.db import Job

        cancel_job(session=session, job=session.get(Job, job_id))
    _wait(lambda: not platform.live_instances(job_id), 60, "instances to stop after cancel", platform)
    assert platform.job(job_id).status == JobStatus.cancelled
