"""Jobs survive their infrastructure: kill -9 of the driver, Redis and PostgreSQL restarts, scaling past the pool's
capacity, a checkpoint directory that cannot be written, and an instance that fails the same way every time.

The platform here runs on its own Redis and PostgreSQL servers (tests/integration/servers.py), so restarting them
disturbs nothing else; the driver's heartbeat TTL is short so a dead driver is noticed within seconds.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from runtime_platform import Platform, wait_until
from servers import PrivatePostgres, PrivateRedis

from backend.db.migrate import upgrade_database
from contract.liveness import Timeouts
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FAST = Timeouts(instance_heartbeat_s=8.0, instance_start_s=120.0, driver_start_s=120.0, driver_heartbeat_ttl_s=5.0)
P, G = 4, 4  # prompts per iteration, group size
FAILOVER = {"max_restarts": 3, "backoff_s": 1.0}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fault-servers")
    cache, pg = PrivateRedis(root / "redis"), PrivatePostgres()
    cache.start()
    pg.init()
    upgrade_database(pg.url)
    try:
        yield cache, pg
    finally:
        cache.stop()
        pg.stop()
        pg.remove()


@pytest.fixture(scope="module")
def fault_platform(servers, make_backend, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    cache, pg = servers
    backend = make_backend(pg.url, cache.url, tmp_path_factory.mktemp("fault-data"))
    env = {"STREAMRL_DRIVER_HEARTBEAT_TTL_S": "5"}
    with Platform.start(backend, cache.url, tiny_model_dir, timeouts=FAST, extra_env=env,
                        generation_slots=2) as platform:
        yield platform
    backend.engine.dispose()


def wait(predicate, timeout_s: float, what: str, platform: Platform) -> None:
    wait_until(predicate, timeout_s, what, platform.logs_tail, errors_ok=True)  # a server may be restarting


def assert_complete_once(platform: Platform, job_id: int, iterations: int) -> None:
    """Every iteration 1..N recorded once, each trained on P x G samples, no sample id trained twice."""
    rows = platform.iterations(job_id)
    assert len(rows) == iterations and all(r["samples"] == P * G for r in rows), [r["samples"] for r in rows]
    consumed = platform.consumed(job_id)  # a set: an id trained twice would not grow it
    assert len(consumed) >= iterations * P * G


@pytest.mark.parametrize("weight_sync", ["shared_store", "p2p"])
def test_kill_9_of_the_driver_restarts_it_from_the_checkpoint(fault_platform: Platform, weight_sync: str) -> None:
    """p2p: the running instances lose the trainer, join the restarted driver and get its (checkpoint's) weights."""
    iterations = 8
    job_id = fault_platform.submit(mode="sync", failover=FAILOVER, checkpoint={"interval": 2},
                                   training={"iterations": iterations, "prompts_per_iteration": P,
                                             "weight_sync": weight_sync})
    wait(lambda: fault_platform.job(job_id).current_iteration >= 3, 240, "three iterations", fault_platform)
    pid = fault_platform.driver_pid(job_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    job = fault_platform.wait_done(job_id, timeout_s=300)
    assert job.error is None and job.driver_epoch == 1 and job.driver_failures == 1
    assert_complete_once(fault_platform, job_id, iterations)
    events = fault_platform.events(job_id)
    assert any("stopped heart-beating" in e and "restarting it" in e for e in events), events
    assert any("driver resumed from checkpoint at iteration" in e for e in events), events


def test_kill_9_of_a_lora_driver_resumes_its_adapter(fault_platform: Platform) -> None:
    """A LoRA job: the restarted driver loads the checkpoint's adapter and its AdamW state over the same base model,
    sends the instances that adapter again and finishes every iteration once."""
    iterations = 6
    job_id = fault_platform.submit(mode="sync", failover=FAILOVER, checkpoint={"interval": 2},
                                   training={"iterations": iterations, "prompts_per_iteration": P, "lr": 1e-2,
                                             "lora": {"rank": 4, "alpha": 8.0}})
    wait(lambda: fault_platform.job(job_id).current_iteration >= 3, 240, "three iterations", fault_platform)
    pid = fault_platform.driver_pid(job_id)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    job = fault_platform.wait_done(job_id, timeout_s=300)
    assert job.error is None and job.driver_epoch == 1 and job.driver_failures == 1
    assert_complete_once(fault_platform, job_id, iterations)
    events = fault_platform.events(job_id)
    assert any("driver resumed from checkpoint at iteration" in e for e in events), events
    rows = fault_platform.iterations(job_id)
    assert all(0 < r["weight_sync_bytes"] < 400_000 for r in rows)  # the adapter alone, before and after the kill


def test_redis_restart_mid_job(fault_platform: Platform, servers) -> None:
    cache, _ = servers
    iterations = 6
    job_id = fault_platform.submit(mode="async", failover=FAILOVER, checkpoint={"interval": 2},
                                   training={"iterations": iterations, "prompts_per_iteration": P})
    wait(lambda: fault_platform.job(job_id).current_iteration >= 2, 240, "two iterations", fault_platform)
    cache.restart(down_s=1.0)  # every stream, set and heartbeat key is gone: Redis here keeps no data
    job = fault_platform.wait_done(job_id, timeout_s=400)
    assert job.error is None
    assert len(fault_platform.iterations(job_id)) == iterations
    assert all(proc.poll() is None for proc in fault_platform.workers.values()), "a worker process died"


def test_postgres_restart_mid_job(fault_platform: Platform, servers) -> None:
    _, pg = servers
    iterations = 6
    job_id = fault_platform.submit(mode="sync", failover=FAILOVER, checkpoint={"interval": 2},
                                   training={"iterations": iterations, "prompts_per_iteration": P})
    wait(lambda: fault_platform.job(job_id).current_iteration >= 2, 240, "two iterations", fault_platform)
    pg.restart(down_s=3.0)
    job = fault_platform.wait_done(job_id, timeout_s=400)
    assert job.error is None
    assert_complete_once(fault_platform, job_id, iterations)


def test_scaling_past_capacity_leaves_instances_pending_and_the_job_completes(fault_platform: Platform) -> None:
    job_id = fault_platform.submit(mode="sync", generation={"instances": 3, "max_tokens": 8},
                                   training={"iterations": 4, "prompts_per_iteration": P})
    job = fault_platform.wait_done(job_id, timeout_s=300)  # 2 worker slots: one instance never runs
    assert job.error is None and len(fault_platform.iterations(job_id)) == 4
    events = fault_platform.events(job_id)
    assert any("exceeds the generation pool" in e and "stay pending" in e for e in events), events


def test_unwritable_checkpoint_dir_fails_the_job_with_the_reason(fault_platform: Platform) -> None:
    job_id = fault_platform.submit(mode="sync", checkpoint={"interval": 1},
                                   training={"iterations": 3, "prompts_per_iteration": P})
    job_dir = Path(fault_platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "checkpoints").write_text("not a directory")  # root ignores file modes; a file cannot hold one
    job = _wait_failed(fault_platform, job_id)
    assert job.error is not None and job.error.startswith("checkpoint save failed:"), job.error


def _wait_failed(platform: Platform, job_id: int):
    deadline = time.time() + 300
    while time.time() < deadline:
        job = platform.job(job_id)
        if job.status == JobStatus.failed:
            return job
        assert job.status != JobStatus.succeeded, "the job succeeded without a checkpoint"
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not fail\n{platform.logs_tail()}")


def test_an_instance_that_always_fails_ends_the_job_with_its_error(fault_platform: Platform) -> None:
    """Every instance fails building its reward (a spec stored before its reward was refused at submit, e.g. by an
    older version of the platform); the controller stops replacing them and fails the job with the error."""
    job_id = fault_platform.submit(mode="sync", failover={"instance_crash_loop": 2}, generation={"instances": 1},
                                   training={"iterations": 2, "prompts_per_iteration": P},
                                   stored_overrides={"reward": {"type": "no_such_reward"}})
    job = _wait_failed(fault_platform, job_id)
    assert job.error is not None and job.error.startswith("generation instances keep failing"), job.error
    assert "no_such_reward" in job.error
