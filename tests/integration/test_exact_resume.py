"""Exact resume: a job whose driver is killed (kill -9) mid-run resumes from its checkpoint and trains, for every
iteration after the checkpoint, the same prompts with the same responses and the same loss as an uninterrupted twin
with the same seed (CPU). The sampling seed of a request leaves the driver epoch out (workers/core/prompts.py); the
prompt schedule, the trainer's RNG and optimizer state come from the checkpoint.

The platform keeps its artifacts in S3-compatible object storage (a SeaweedFS server, tests/object_store.py), and the
killed sync job's local checkpoints are deleted with its driver: the resume reads the checkpoint from the store."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from runtime_platform import Platform, wait_until
from sqlalchemy import select

from backend.db import JobSample
from contract.liveness import Timeouts
from workers.core.prompts import epoch_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAST = Timeouts(instance_heartbeat_s=8.0, instance_start_s=120.0, driver_start_s=120.0, driver_heartbeat_ttl_s=5.0)
ITERATIONS, CHECKPOINT = 6, 2
SHAPE = {"training": {"iterations": ITERATIONS, "prompts_per_iteration": 2, "micro_batch_size": 4, "lr": 1e-3},
         "generation": {"instances": 1, "batch_size": 16, "max_tokens": 8}, "checkpoint": {"interval": CHECKPOINT},
         "reward": {"type": "regex", "params": {"pattern": "[0-5]"}},  # rewards that differ: real gradients
         "failover": {"max_restarts": 3, "backoff_s": 1.0}}


@pytest.fixture(scope="module")
def resume_platform(pg_backend, redis_url: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    with SeaweedS3(tmp_path_factory.mktemp("resume-store")) as store, \
            Platform.start(pg_backend, redis_url, tiny_model_dir, timeouts=FAST,
                           extra_env={"STREAMRL_DRIVER_HEARTBEAT_TTL_S": "5", **store.env("streamrl/resume")}
                           ) as platform:
        yield platform


def _trained(platform: Platform, job_id: int) -> dict[int, list[tuple[str, str]]]:
    """Per iteration: the (prompt, response) pairs of its samples from the newest driver epoch that trained it (an
    iteration the killed driver trained after the checkpoint is trained again by the next one), sorted."""
    out: dict[int, dict[int, list[tuple[str, str]]]] = {}
    with platform.backend.session() as session:
        for row in session.scalars(select(JobSample).where(JobSample.job_id == job_id)):
            by_epoch = out.setdefault(row.iteration, {})
            by_epoch.setdefault(epoch_of(row.sample_id), []).append((row.prompt, row.response))
    return {it: sorted(by_epoch[max(by_epoch)]) for it, by_epoch in out.items()}


def test_sync_kill_9_and_resume_trains_as_the_uninterrupted_twin(resume_platform: Platform) -> None:
    twin = resume_platform.submit(name="twin", mode="sync", **SHAPE)
    resume_platform.wait_done(twin, timeout_s=300)
    killed = resume_platform.submit(name="killed", mode="sync", **SHAPE)
    wait_until(lambda: resume_platform.job(killed).current_iteration >= CHECKPOINT + 1, 240, "past the checkpoint",
               resume_platform.logs_tail)
    pid = resume_platform.driver_pid(killed)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    job_dir = Path(resume_platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(killed)
    shutil.rmtree(job_dir / "checkpoints")  # the host's disk is lost: the checkpoint comes from the object store
    shutil.rmtree(Path(resume_platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "cache" / "objects",
                  ignore_errors=True)
    job = resume_platform.wait_done(killed, timeout_s=300)
    assert job.driver_epoch >= 1 and job.driver_failures >= 1  # it really was restarted
    assert any("driver resumed from checkpoint at iteration" in e for e in resume_platform.events(killed))
    twin_rows, killed_rows = resume_platform.iterations(twin), resume_platform.iterations(killed)
    assert len(killed_rows) == len(twin_rows) == ITERATIONS
    twin_samples, killed_samples = _trained(resume_platform, twin), _trained(resume_platform, killed)
    for it in range(CHECKPOINT + 1, ITERATIONS + 1):
        assert killed_samples[it] == twin_samples[it], it  # the same prompts, answered the same way
        assert killed_rows[it - 1]["loss"] == pytest.approx(twin_rows[it - 1]["loss"], rel=1e-5, abs=1e-6), it
    assert any(row["grad_norm"] > 0 for row in twin_rows)  # the weights moved: the comparison means something


def test_async_kill_9_and_resume_trains_the_same_prompts(resume_platform: Platform) -> None:
    """Async: an iteration trains the samples of its own requests (workers/runtime/collector.py), whose prompts are a
    function of the iteration (workers/core/prompts.py `PromptSchedule.rows_for`): after a restart, whatever was in
    flight from the dead driver's epoch is dropped and the same prompts are dispatched again, so every iteration
    trains the prompts the uninterrupted twin trained (responses may differ: the weights that generated them do)."""
    twin = resume_platform.submit(name="async-twin", mode="async", **SHAPE)
    resume_platform.wait_done(twin, timeout_s=300)
    killed = resume_platform.submit(name="async-killed", mode="async", **SHAPE)
    wait_until(lambda: resume_platform.job(killed).current_iteration >= CHECKPOINT + 1, 240, "past the checkpoint",
               resume_platform.logs_tail)
    pid = resume_platform.driver_pid(killed)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    job = resume_platform.wait_done(killed, timeout_s=300)
    assert job.driver_epoch >= 1 and job.driver_failures >= 1
    twin_samples, killed_samples = _trained(resume_platform, twin), _trained(resume_platform, killed)
    assert sorted(killed_samples) == sorted(twin_samples) == list(range(1, ITERATIONS + 1))
    for it in range(1, ITERATIONS + 1):
        assert [p for p, _ in killed_samples[it]] == [p for p, _ in twin_samples[it]], it
