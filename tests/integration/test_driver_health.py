"""`GET /jobs/{id}/health` tells the truth while a job recovers, on real workers: after kill -9 of the driver it says
"driver lost", then "restarting", then "resuming from checkpoint N" until a new iteration is recorded, never healthy
in between; while Redis is down it says the driver cannot be seen.

The platform runs on a Redis server of its own (stopped and started here) and the session's Postgres; the driver's
heartbeat TTL is 30 s, longer than the health's 10 s limit (LOST_AFTER_S), so the killed driver's key is still there
when the health must already call it lost.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from runtime_platform import Platform, wait_until
from servers import PrivateRedis

from backend.services.driver_liveness import LOST_AFTER_S
from contract.liveness import Timeouts

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TTL_S = 30
TIMEOUTS = Timeouts(instance_heartbeat_s=8.0, instance_start_s=120.0, driver_start_s=120.0,
                    driver_heartbeat_ttl_s=TTL_S)
P = 4  # prompts per iteration
DRIVER_STATES = {"driver_lost", "restarting_driver", "resuming"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("health-redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def health_platform(cache: PrivateRedis, pg_url: str, make_backend: Any, tiny_model_dir: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Platform, TestClient]]:
    backend = make_backend(pg_url, cache.url, tmp_path_factory.mktemp("health-data"))
    env = {"STREAMRL_DRIVER_HEARTBEAT_TTL_S": str(TTL_S)}
    with Platform.start(backend, cache.url, tiny_model_dir, timeouts=TIMEOUTS, extra_env=env,
                        generation_slots=2) as platform, backend.client() as api:
        yield platform, api
    backend.engine.dispose()


def health(platform: Platform, api: TestClient, job_id: int) -> dict[str, Any]:
    answer = api.get(f"/api/v1/jobs/{job_id}/health", headers=platform.backend.auth_headers(platform.user))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_health_after_kill_9_of_the_driver(health_platform: tuple[Platform, TestClient]) -> None:
    platform, api = health_platform
    job_id = platform.submit(mode="sync", failover={"max_restarts": 3, "backoff_s": 1.0}, checkpoint={"interval": 2},
                             training={"iterations": 10, "prompts_per_iteration": P})
    wait_until(lambda: platform.job(job_id).current_iteration >= 3, 240, "three iterations", platform.logs_tail)
    assert health(platform, api, job_id)["state"] not in DRIVER_STATES
    pid = platform.driver_pid(job_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed, killed_at = time.monotonic(), platform.job(job_id).current_iteration

    seen: list[tuple[str, str]] = []  # (state, summary) once the health may have noticed (LOST_AFTER_S after the kill)

    def recovered() -> bool:
        now = health(platform, api, job_id)
        if time.monotonic() - killed > LOST_AFTER_S + 1 and (not seen or seen[-1] != (now["state"], now["summary"])):
            seen.append((now["state"], now["summary"]))
        return now["state"] not in DRIVER_STATES and platform.job(job_id).current_iteration > killed_at

    wait_until(recovered, 300, "the job to progress past the kill", lambda: f"{seen}\n{platform.logs_tail()}")
    during = [state for state, _ in seen[:-1]]
    assert during and set(during) <= DRIVER_STATES, seen  # never healthy before real progress
    summaries = [summary for _, summary in seen]
    assert any(s.startswith("driver lost: no heartbeat for") for s in summaries), seen  # before the key expired
    assert "restarting_driver" in during, seen
    assert during.index("driver_lost") < during.index("restarting_driver"), seen
    # "resuming" lasts from the driver's resumed event to its first new iteration: on an idle machine that can be
    # shorter than one poll, so when the polls missed it, the event it is read from must be there
    if "resuming" in during:
        assert any(s.startswith("resuming from checkpoint ") for s in summaries), seen
        assert during.index("restarting_driver") < during.index("resuming"), seen
    else:
        assert any(e.startswith("driver resumed from checkpoint at iteration") for e in platform.events(job_id)), seen
    assert platform.wait_done(job_id, timeout_s=300).error is None


def test_health_during_a_redis_outage(health_platform: tuple[Platform, TestClient], cache: PrivateRedis) -> None:
    platform, api = health_platform
    job_id = platform.submit(mode="async", failover={"max_restarts": 3, "backoff_s": 1.0}, checkpoint={"interval": 2},
                             training={"iterations": 6, "prompts_per_iteration": P})
    wait_until(lambda: platform.job(job_id).current_iteration >= 2, 240, "two iterations", platform.logs_tail)
    cache.stop()
    try:
        down = wait_until(lambda: (h := health(platform, api, job_id))["state"] == "driver_lost" and h, 30,
                          "the health to report the outage", platform.logs_tail)
        assert down["summary"].startswith("driver unreachable: Redis is down") and not down["healthy"], down
    finally:
        cache.start()
    assert platform.wait_done(job_id, timeout_s=400).error is None
    assert len(platform.iterations(job_id)) == 6
