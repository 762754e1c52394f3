"""Shared training processes on the real platform (Celery workers, Postgres, Redis, the controller loop): three LoRA
jobs of two teams with `training.share: true` train at once in ONE training process on a worker with ONE training
slot, each with its own adapter, optimizer, weight versions and checkpoints; cancelling one leaves the others
training; a kill -9 of the process restarts both remaining drivers from their checkpoints on a new process, and a
warm shutdown of the worker makes both hand their jobs back, to finish on the next worker."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_platform import TEST_TIMEOUTS, Platform, base_spec, wait_until

from backend.db import Job
from backend.services.jobs import cancel_job
from contract import keys
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DIGITS = {"type": "regex", "params": {"pattern": "[0-9]"}}
ITERATIONS = 30  # enough that both jobs still run when their worker shuts down
# the kill -9 is noticed once the drivers' heartbeat key expires: 15 s (drivers beat every 2 s), not the default 60 s
# the test would otherwise sit out
HEARTBEAT_TTL_S = 15.0


@pytest.fixture(scope="module")
def one_slot(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[Platform]:
    """A platform whose training pool has ONE slot: only a shared process can run several drivers at once."""
    timeouts = dataclasses.replace(TEST_TIMEOUTS, driver_heartbeat_ttl_s=HEARTBEAT_TTL_S)
    env = {"STREAMRL_DRIVER_HEARTBEAT_TTL_S": str(HEARTBEAT_TTL_S)}
    with Platform.start(pg_backend, redis_url, tiny_model_dir, timeouts=timeouts, extra_env=env,
                        start_workers=False) as running:
        running.start_worker("generation", concurrency=2)
        running.start_worker("training", concurrency=1)
        for pool in ("generation", "training"):
            running.wait_registered(pool)
        yield running


def _lora_job(iterations: int, seed: int, lr: float) -> dict[str, Any]:
    return base_spec(mode="sync", seed=seed, reward=DIGITS, generation={"instances": 1},
                     training={"iterations": iterations, "prompts_per_iteration": 4, "lora": {"rank": 8}, "lr": lr,
                               "share": True},
                     checkpoint={"interval": 2})


def test_three_lora_jobs_train_in_one_shared_process_on_one_slot(one_slot: Platform) -> None:
    platform = one_slot
    other_team, other_user = platform.other_team(max_concurrent_jobs=2, max_generation_instances=2)
    cancelled = platform.submit_as(platform.team, platform.user, _lora_job(60, seed=0, lr=1e-2))
    first = platform.submit_as(platform.team, platform.user, _lora_job(ITERATIONS, seed=1, lr=1e-2))
    second = platform.submit_as(other_team, other_user, _lora_job(ITERATIONS, seed=2, lr=2e-2))
    jobs = (cancelled, first, second)

    pids: dict[int, int] = {}

    def all_driving() -> bool:
        pids.update({job_id: pid for job_id in jobs if (pid := platform.driver_pid(job_id)) is not None})
        return len(pids) == 3

    wait_until(all_driving, 240, "the three drivers run", logs=platform.logs_tail)
    assert len(set(pids.values())) == 1, pids  # one process holds the three drivers, on the worker's one slot
    placed = {job_id: [e for e in platform.events(job_id) if "in shared training process train-" in e]
              for job_id in jobs}
    process_keys = {m.group(0) for p in placed.values() if (m := re.search(r"train-[0-9a-f]+-\d+", p[0]))}
    assert all(placed.values()) and len(process_keys) == 1, placed
    (key,) = process_keys
    state: dict[str, Any] = {}

    def beats_with_all_three() -> bool:  # its heartbeat (every 2 s) lists its drivers and the memory room it has
        state.update(json.loads(platform.client.get(keys.share_state(key)) or b"{}"))
        return sorted(state.get("members", [])) == sorted(jobs)

    wait_until(beats_with_all_three, 30, "the process's heartbeat lists the three drivers", logs=platform.logs_tail)
    assert state["room"] >= 1, state
    mapped: dict[int, list[str]] = {}

    def all_mapped() -> bool:
        mapped.update({j: [e for e in platform.events(j) if e.startswith("frozen base weights")] for j in jobs})
        return all(mapped.values())

    wait_until(all_mapped, 240, "the three trainers map the base weights", logs=platform.logs_tail)
    assert len({m[0].split("copy ")[1] for m in mapped.values()}) == 1, mapped  # one file, one mapping

    wait_until(lambda: all(len(platform.iterations(j)) >= 2 for j in jobs), 300, "the three jobs train",
               logs=platform.logs_tail)
    with platform.backend.session() as session:
        job = session.get(Job, cancelled)
        assert job is not None
        cancel_job(session=session, job=job)
    wait_until(lambda: platform.job(cancelled).status == JobStatus.cancelled, 60, "the cancel lands")
    trained_at_cancel = {j: len(platform.iterations(j)) for j in (first, second)}
    wait_until(lambda: all(len(platform.iterations(j)) > trained_at_cancel[j] + 1 for j in (first, second)), 300,
               "the other two train on after the cancel", logs=platform.logs_tail)
    assert platform.driver_pid(first) == pids[first], "the cancel did not take the process down"

    os.kill(pids[first], signal.SIGKILL)  # the shared process dies mid-job: both drivers are lost together
    restarted: dict[int, int] = {}

    def both_restarted() -> bool:
        restarted.update({j: pid for j in (first, second) if (pid := platform.driver_pid(j)) not in (None, pids[j])})
        return len(restarted) == 2

    wait_until(both_restarted, 240, "both drivers restart on a new process", logs=platform.logs_tail)
    assert len(set(restarted.values())) == 1, restarted  # one new shared process for both
    for job_id in (first, second):
        assert any("training driver restarted" in e for e in platform.events(job_id)), platform.events(job_id)
    progress = {j: len(platform.iterations(j)) for j in (first, second)}
    wait_until(lambda: all(len(platform.iterations(j)) > progress[j] for j in (first, second)), 300,
               "both train on after the restart", logs=platform.logs_tail)

    assert {platform.job(j).status for j in (first, second)} == {JobStatus.running}
    platform.stop_worker("training")  # a warm shutdown: every driver of the process hands its job back
    for job_id in (first, second):
        wait_until(lambda j=job_id: any("handed the job back" in e for e in platform.events(j)), 60,
                   f"job {job_id}'s driver hands the job back", logs=platform.logs_tail)
    platform.start_worker("training", concurrency=1)
    for job_id in (first, second):
        done = platform.wait_done(job_id, timeout_s=600)
        assert done.error is None and len(platform.iterations(job_id)) == ITERATIONS
        # each restart went back to a shared process of the same key and resumed from the job's own checkpoint
        assert len([e for e in platform.events(job_id) if "in shared training process train-" in e]) == 3
        checkpoints = Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id) / "checkpoints"
        assert checkpoints.is_dir() and any(checkpoints.iterdir()), checkpoints
    # each job trained its own adapter: same base, different seeds and learning rates, different losses
    assert [r["loss"] for r in platform.iterations(first)] != [r["loss"] for r in platform.iterations(second)]
    assert platform.controller_errors == []
