"""The cluster view and the training-signal checks against a real platform: Celery worker processes (3 generation
slots, 2 training slots) registering themselves with resource samples and the tasks they run, a controller loop, a
real job on a tiny random model."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from runtime_platform import TEST_TIMEOUTS, Platform, wait_until
from sqlalchemy import select

from backend.db import GenerationInstance, JobStatus
from backend.services.jobs import cancel_job


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[Platform]:
    """The shared platform with a production-like heartbeat timeout: nothing here tests failover, and on a loaded host
    (CI's other test process) a beat 6 s late made the controller replace live instances, so the view the test waits
    for (3 held, 1 pending) kept changing under it."""
    with Platform.start(pg_backend, redis_url, tiny_model_dir,
                        timeouts=replace(TEST_TIMEOUTS, instance_heartbeat_s=30.0)) as running:
        yield running


def _cancel(platform: Any, job_id: int) -> None:
    with platform.backend.session() as session:
        job = platform.job(job_id)
        cancel_job(session=session, job=session.merge(job))


def test_cluster_shows_workers_holders_samples_and_pending_and_a_zero_reward_job_fires_its_check(
    platform: Any
) -> None:
    # exact match on arithmetic: an untrained tiny model never gets it, so every group is flat (reward 0.000)
    job_id = platform.submit(name="cluster-view", generation={"instances": 4, "max_tokens": 4},
                             training={"iterations": 400, "prompts_per_iteration": 2, "micro_batch_size": 8})
    headers = platform.backend.auth_headers(platform.user, platform.team)
    other_team = platform.backend.make_team()
    other_headers = platform.backend.auth_headers(platform.backend.make_user(other_team), other_team)
    try:
        with platform.backend.client() as api:
            def view() -> dict[str, Any]:
                answer = api.get("/api/v1/cluster", headers=headers)
                assert answer.status_code == 200, answer.text
                return answer.json()

            def held() -> dict[str, Any] | None:
                current = view()
                holders = [h for w in current["workers"] for h in w["holders"] if h["job_id"] == job_id]
                instances = [h for h in holders if h["task"] == "generation.run_instance"]
                driver = any(h["task"] == "training.run_job" for h in holders)
                return current if driver and len(instances) == 3 and len(current["pending"]) == 1 else None

            current = wait_until(held, 240, "the job's driver and instances on the cluster page", platform.logs_tail)
            pools = {p["pool"]: p for p in current["pools"]}
            assert pools["generation"]["slots"] == 3 and pools["generation"]["busy"] == 3
            assert pools["training"]["slots"] == 2 and pools["training"]["busy"] >= 1
            [pending] = current["pending"]  # 4 asked for, 3 slots: one waits, and the answer says why
            assert pending["job_id"] == job_id and pending["job_name"] == "cluster-view"
            assert pending["reason"].startswith("all 3 generation slots are busy")
            generation = next(w for w in current["workers"] if "generation" in w["pools"])
            names = {h["instance_id"] for h in generation["holders"]}
            assert names <= {"gen-0", "gen-1", "gen-2", "gen-3"} and len(names) == 3
            assert all(h["job_name"] == "cluster-view" for h in generation["holders"])
            samples = wait_until(lambda: len(view()["workers"][0]["samples"]) >= 2 and view()["workers"][0]["samples"],
                                 60, "two resource samples", platform.logs_tail)
            assert samples[-1]["memory_mb"] > 10 and samples[-1]["cpu_percent"] >= 0
            assert samples[0]["at"] < samples[-1]["at"]  # oldest first

            # another team sees the same workers and load, never this team's job ids or names
            answer = api.get("/api/v1/cluster", headers=other_headers)
            assert answer.status_code == 200 and answer.json()["pending"] == []
            foreign = [h for w in answer.json()["workers"] for h in w["holders"]]
            assert foreign and all(h["job_id"] is None and h["job_name"] is None for h in foreign)

            def fired() -> dict[str, Any] | None:
                health = api.get(f"/api/v1/jobs/{job_id}/health", headers=headers).json()
                return health if health["signals"] else None

            health = wait_until(fired, 300, "the reward_constant check", platform.logs_tail)
            assert health["signals"][0]["check"] == "reward_constant" and health["state"] != "generating"
            row = platform.iterations(job_id)[-1]
            assert row["reward_flat_groups"] == 1.0 and 0.0 <= row["truncated_fraction"] <= 1.0
    finally:
        _cancel(platform, job_id)
        platform.wait_status(job_id, {JobStatus.cancelled}, 30)
        wait_until(lambda: not platform.live_instances(job_id), 60, "the instances to stop", platform.logs_tail)
        with platform.backend.session() as session:
            assert session.scalars(select(GenerationInstance).where(GenerationInstance.job_id == job_id)).first()
