"""Tinker sessions time-sliced on one training slot (docs/tinker.md#parking), through the official `tinker` SDK on a
live API, the controller and real Celery workers: ONE training worker with ONE slot, sessions parked after
STREAMRL_TINKER_IDLE_S = 3 s without a call.

- two idle LoRA sessions of one team hold no slot: another team's RL job runs and succeeds while they are parked, and
  both train on afterwards from where they were (the same loss as before parking), each restore recorded;
- a client training through a warm shutdown and restart of the training worker loses no step: the session parks at
  once (the worker's shutdown takes seconds, not its 20 s SIGKILL grace), the calls made meanwhile wait, and the loss
  trajectory is the one of an uninterrupted session;
- after a kill -9 the session resumes from its last automatic park and runs the calls since again from its stream;
  when the stream lost them, the client is told how many steps were lost."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import tinker
from runtime_platform import Platform, base_spec, wait_until
from sqlalchemy import select
from tinker import types
from tinker_client import api_key, sft_batch
from waiting import api_in_thread, stop_process_groups

from backend.db import JobEvent, JobStatus
from backend.db.models import Job
from contract import keys
from contract.liveness import Timeouts

pytestmark = [pytest.mark.integration, pytest.mark.slow]
IDLE_S = 3.0
PARK_EVERY = 2
LR = 1e-2
TIMEOUTS = Timeouts(instance_heartbeat_s=6.0, instance_start_s=180.0, driver_start_s=180.0,
                    driver_heartbeat_ttl_s=10.0)


@pytest.fixture(scope="module")
def parking(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[tuple[Platform, str]]:
    env = {"STREAMRL_TINKER_IDLE_S": str(IDLE_S), "STREAMRL_TINKER_PARK_EVERY": str(PARK_EVERY),
           "STREAMRL_DRIVER_HEARTBEAT_TTL_S": str(TIMEOUTS.driver_heartbeat_ttl_s)}
    with Platform.start(pg_backend, redis_url, tiny_model_dir, timeouts=TIMEOUTS, extra_env=env,
                        start_workers=False) as platform:
        platform.start_worker("generation", concurrency=2)
        platform.start_worker("training", concurrency=1)  # one slot: parking is what lets anyone else run
        for pool in ("generation", "training"):
            platform.wait_registered(pool)
        with api_in_thread(platform.backend.settings) as url:
            yield platform, f"{url}/tinker"


def _steps(trainer: Any, n: int, timeout_s: float = 240) -> list[float]:
    """n steps of forward_backward + optim_step; each step's loss (before its update)."""
    losses = []
    for _ in range(n):
        fwd = trainer.forward_backward(sft_batch(), "cross_entropy")
        step = trainer.optim_step(types.AdamParams(learning_rate=LR))
        losses.append(fwd.result(timeout=timeout_s).metrics["loss:sum"])
        step.result(timeout=timeout_s)
    return losses


def _loss(trainer: Any, timeout_s: float = 240) -> float:
    return float(trainer.forward(sft_batch(), "cross_entropy").result(timeout=timeout_s).metrics["loss:sum"])


def _job(platform: Platform, model_id: str) -> Job:
    with platform.backend.session() as session:
        job = session.scalar(select(Job).where(Job.name == model_id))
        assert job is not None
        return job


def _tinker_events(platform: Platform, job_id: int, kind: str) -> list[dict[str, Any]]:
    with platform.backend.session() as session:
        rows = session.scalars(select(JobEvent.data).where(JobEvent.job_id == job_id, JobEvent.kind == "tinker"))
        return [dict(data) for data in rows if data and data.get("tinker") == kind]


def _wait_parked(platform: Platform, model_id: str, timeout_s: float = 60) -> Job:
    return wait_until(lambda: (job := _job(platform, model_id)).status == JobStatus.parked and job, timeout_s,
                      f"{model_id} to park", logs=platform.logs_tail)


def test_idle_sessions_park_and_another_teams_job_runs(parking: tuple[Platform, str]) -> None:
    platform, url = parking
    service = tinker.ServiceClient(base_url=url, api_key=api_key(platform.backend, platform.team.id, platform.user.id))
    first = service.create_lora_training_client(base_model="tiny", rank=4, seed=0).result(timeout=240)
    first_losses = _steps(first, 2)
    # one slot: the second session starts once the first has parked
    second = service.create_lora_training_client(base_model="tiny", rank=4, seed=1).result(timeout=240)
    second_losses = _steps(second, 2)
    before = {first.model_id: _loss(first), second.model_id: _loss(second)}
    for trainer in (first, second):
        _wait_parked(platform, trainer.model_id)
    run = httpx.get(f"{url}/api/v1/training_runs/{first.model_id}",
                    headers={"X-API-Key": api_key(platform.backend, platform.team.id, platform.user.id)}).json()
    assert run["parked"] is True and run["status"] == "parked" and run["restores"] >= 1, run

    other, other_user = platform.other_team(max_concurrent_jobs=2, max_generation_instances=4)
    rl_job = platform.submit_as(other, other_user, base_spec(name="other-team-rl", generation={"instances": 1}))
    platform.wait_done(rl_job, timeout_s=400)  # the idle sessions held no training slot
    assert {_job(platform, t.model_id).status for t in (first, second)} == {JobStatus.parked}

    # both train on from where they were: the same loss as before parking, then lower
    for trainer, losses in ((first, first_losses), (second, second_losses)):
        assert _loss(trainer) == pytest.approx(before[trainer.model_id], rel=1e-5)
        more = _steps(trainer, 2)
        assert more[0] == pytest.approx(before[trainer.model_id], rel=1e-5), (losses, more)
        assert more[0] != pytest.approx(losses[0], rel=1e-3)  # trained on, not started again
        assert _job(platform, trainer.model_id).current_iteration == 4  # steps 3 and 4 after steps 1 and 2
        job = _job(platform, trainer.model_id)
        restores = _tinker_events(platform, job.id, "resumed")
        assert restores and all(event["restore_s"] > 0 for event in restores), restores
        assert len(_tinker_events(platform, job.id, "parked")) >= 1
    run = httpx.get(f"{url}/api/v1/training_runs/{second.model_id}",
                    headers={"X-API-Key": api_key(platform.backend, platform.team.id, platform.user.id)}).json()
    assert run["last_restore_s"] > 0 and run["steps_lost"] == 0, run
    service.close("success").result()
    for trainer in (first, second):  # a parked session ends where it is
        wait_until(lambda t=trainer: _job(platform, t.model_id).status == JobStatus.succeeded, 60,
                   f"{trainer.model_id} to end", logs=platform.logs_tail)


def test_training_through_a_warm_restart_of_the_worker_loses_no_step(parking: tuple[Platform, str]) -> None:
    platform, url = parking
    service = tinker.ServiceClient(base_url=url, api_key=api_key(platform.backend, platform.team.id, platform.user.id))
    reference = service.create_lora_training_client(base_model="tiny", rank=4, seed=3).result(timeout=240)
    expected = _steps(reference, 6)

    trainer = service.create_lora_training_client(base_model="tiny", rank=4, seed=3).result(timeout=240)
    losses = _steps(trainer, 3)
    # step 4 is in flight while the worker shuts down (Ctrl-C of `streamrl up`: SIGTERM, a warm shutdown)
    fwd = trainer.forward_backward(sft_batch(), "cross_entropy")
    step = trainer.optim_step(types.AdamParams(learning_rate=LR))
    stopped: dict[str, float] = {}

    def stop() -> None:  # as `up` stops its worker (backend/supervisor.py): SIGTERM to the worker's main process
        started = time.monotonic()
        worker = platform.workers.pop("training")
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        finally:
            stopped["s"] = time.monotonic() - started
            stop_process_groups([worker])  # its group, if it were still there after the 20 s `up` gives it

    stopper = threading.Thread(target=stop)
    stopper.start()
    job = _job(platform, trainer.model_id)
    wait_until(lambda: any(e["reason"] == "its worker is shutting down" for e in _tinker_events(platform, job.id,
                                                                                             "parked")),
               30, "the session to park at the shutdown", logs=platform.logs_tail)
    later = trainer.forward_backward(sft_batch(), "cross_entropy")  # made while no worker is up
    later_step = trainer.optim_step(types.AdamParams(learning_rate=LR))
    stopper.join(timeout=60)
    assert stopped["s"] < 10, f"the training worker took {stopped['s']:.1f}s to stop"

    platform.start_worker("training", concurrency=1)
    losses.append(fwd.result(timeout=300).metrics["loss:sum"])
    step.result(timeout=300)
    losses.append(later.result(timeout=300).metrics["loss:sum"])
    later_step.result(timeout=300)
    losses += _steps(trainer, 1)
    assert losses == pytest.approx(expected, rel=1e-5), (losses, expected)
    with platform.backend.session() as session:
        steps = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id)).all()
        assert any((e.data or {}).get("tinker") == "resumed" for e in steps)
    assert _job(platform, trainer.model_id).current_iteration == 6
    service.close("success").result()


def test_a_kill_9_resumes_from_the_last_park_and_reports_lost_steps(parking: tuple[Platform, str]) -> None:
    platform, url = parking
    platform.wait_registered("training")
    service = tinker.ServiceClient(base_url=url, api_key=api_key(platform.backend, platform.team.id, platform.user.id))
    reference = service.create_lora_training_client(base_model="tiny", rank=4, seed=5).result(timeout=240)
    expected = _steps(reference, 4)
    trainer = service.create_lora_training_client(base_model="tiny", rank=4, seed=5).result(timeout=240)
    losses = _steps(trainer, 3)  # parked automatically at step 2 (PARK_EVERY), step 3 only in the stream
    job = _job(platform, trainer.model_id)

    # kill -9 of the worker: the calls since the park are still in the stream and run again: nothing lost
    os.killpg(platform.workers.pop("training").pid, signal.SIGKILL)
    platform.start_worker("training", concurrency=1)
    losses += _steps(trainer, 1, timeout_s=400)
    assert losses == pytest.approx(expected, rel=1e-5), (losses, expected)
    wait_until(lambda: _job(platform, trainer.model_id).status == JobStatus.running, 60, "the session to be back")

    # kill -9 and the stream gone with it (Redis lost its data): back at the last park, the client is told
    steps_before = _job(platform, trainer.model_id).current_iteration  # 4: parked at 4
    _steps(trainer, 1)  # step 5, not parked
    os.killpg(platform.workers.pop("training").pid, signal.SIGKILL)
    platform.client.delete(keys.tinker_requests(job.id))
    platform.start_worker("training", concurrency=1)
    fwd = trainer.forward_backward(sft_batch(), "cross_entropy")
    step = trainer.optim_step(types.AdamParams(learning_rate=LR))
    try:
        lost_metric = fwd.result(timeout=300).metrics["steps_lost:max"]
    except TimeoutError as err:
        raise AssertionError(f"no answer after the restore: {platform.events(job.id)[-12:]}\n"
                             f"{platform.logs_tail()}") from err
    assert lost_metric == 1.0
    step.result(timeout=400)
    lost = _tinker_events(platform, job.id, "steps_lost")
    assert lost and lost[-1]["steps_lost"] == 1 and lost[-1]["step"] == steps_before, lost
    service.close("success").result()


def test_the_schedulers_preemption_flag_parks_a_running_session(parking: tuple[Platform, str]) -> None:
    """The scheduler's `keys.job_preempt` flag (backend/services/admission.py) parks a session at once: its slot is
    free within a read of its stream, and its next call restores it where it was."""
    platform, url = parking
    platform.wait_registered("training")
    service = tinker.ServiceClient(base_url=url, api_key=api_key(platform.backend, platform.team.id, platform.user.id))
    trainer = service.create_lora_training_client(base_model="tiny", rank=4, seed=7).result(timeout=240)
    _steps(trainer, 1)
    before = _loss(trainer)
    job = _job(platform, trainer.model_id)
    assert job.status == JobStatus.running
    platform.client.set(keys.job_preempt(job.id), '{"reason": "a high priority job of another team waits"}')
    parked = wait_until(lambda: _tinker_events(platform, job.id, "parked"), 2 * IDLE_S,
                        "the flagged session to park before its idle timeout", logs=platform.logs_tail)
    assert parked[-1]["reason"] == "preempted: a high priority job of another team waits"
    assert not platform.client.exists(keys.job_preempt(job.id))
    assert _loss(trainer) == pytest.approx(before, rel=1e-5)
    service.close("success").result()
