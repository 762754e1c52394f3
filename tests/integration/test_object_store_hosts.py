"""Hosts that share nothing but PostgreSQL, Redis and an S3 server (SeaweedFS, tests/object_store.py): every worker
process has its own data dir, `STREAMRL_ARTIFACTS=s3://...`. An async job with shared-store weight sync publishes its
versions and checkpoints through the object store; the training worker running the driver is killed (kill -9) and its
local data dir deleted: the job resumes on the other training worker from the store's checkpoint and succeeds, every
iteration recorded once."""

from __future__ import annotations

import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from runtime_platform import base_spec
from sqlalchemy import select
from test_multi_host import API, Cluster, _free_port, _healthy, _wait
from waiting import environ_snapshot, stop_process_groups

from backend.db import Job, JobStatus, Model
from backend.db.enums import TERMINAL_JOB_STATUSES
from contract.artifact_store import checkpoints_prefix

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3, shared_server  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# CI cost (2 cores): 6 short iterations (checkpoints at 2, 4, 6: retention keeps 2), one generation host (its
# instance reads every weight version from the store), two training hosts (the driver's and the one it moves to)
ITERATIONS, PROMPTS, GROUP = 6, 2, 4
WORKERS = (("gen", "generation", "0"), ("train-a", "training", "0"), ("train-b", "training", "1"))


@pytest.fixture(scope="module")
def hosts(pg_backend: Any, redis_url: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[tuple[Cluster, str, dict[str, str], Any, SeaweedS3, Path]]:
    with pg_backend.session() as session:  # the database is shared with earlier modules: their jobs are not ours
        for job in session.scalars(select(Job).where(Job.status.not_in(TERMINAL_JOB_STATUSES))):
            job.status = JobStatus.cancelled
    team = pg_backend.make_team(max_concurrent_jobs=2, max_generation_instances=8)
    user = pg_backend.make_user(team)
    with pg_backend.session() as session:  # the model is a path every host has (docs/operator.md)
        session.add(Model(team_id=team.id, name="tiny", path=str(tiny_model_dir), created_by_id=user.id))
    root = tmp_path_factory.mktemp("object-store-hosts")
    seaweed = shared_server()
    env = {**environ_snapshot(), **seaweed.env("streamrl/hosts"), "STREAMRL_DATABASE_URL": pg_backend.url,
           "STREAMRL_REDIS_URL": redis_url, "STREAMRL_SECRET_KEY": pg_backend.settings.secret_key,
           "STREAMRL_AUTO_MIGRATE": "false", "STREAMRL_DEVICE": "cpu", "PYTHONPATH": str(Path.cwd()),
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "STREAMRL_DRIVER_HEARTBEAT_TTL_S": "5",
           "STREAMRL_INSTANCE_HEARTBEAT_TIMEOUT_S": "8"}
    cluster = Cluster(env, root)
    port = _free_port()
    for name in ("api", "controller", *(w[0] for w in WORKERS)):
        (root / name).mkdir()
    own = {name: {"STREAMRL_DATA_DIR": str(root / name)} for name in ("api", "controller", *(w[0] for w in WORKERS))}
    cluster.start("api", "-m", "uvicorn", "backend.main:create_app", "--factory", "--port", str(port), env=own["api"])
    cluster.start("controller", "-m", "streamrl.cli.main", "controller", "--interval", "0.5", env=own["controller"])
    for name, pool, cores in WORKERS:
        cluster.start(name, "-m", "streamrl.cli.main", "worker", "--pool", pool, "--devices", cores, env=own[name])
    try:
        yield cluster, f"http://127.0.0.1:{port}", pg_backend.auth_headers(user, team), team, seaweed, root
    finally:
        stop_process_groups([cluster.procs.pop(name) for name in list(cluster.procs)])


def test_job_survives_losing_the_training_host(hosts: tuple[Cluster, str, dict[str, str], Any, SeaweedS3, Path]
                                               ) -> None:
    procs, url, headers, team, seaweed, root = hosts
    spec = base_spec(name="object-store", mode="async", max_staleness=1, checkpoint={"interval": 2, "keep": 2},
                     failover={"max_restarts": 3, "backoff_s": 1.0},
                     generation={"instances": 1, "batch_size": 16, "max_tokens": 8},
                     training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS, "micro_batch_size": 8,
                               "lr": 1e-3, "weight_sync": "shared_store"},
                     algorithm={"name": "grpo", "group_size": GROUP})
    store = seaweed.client()
    with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
        _wait(lambda: _healthy(api), 60, "the API", procs)
        submitted = api.post(f"{API}/jobs", json=spec)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        prefix = f"hosts/{checkpoints_prefix(team.id, job_id)}/"

        def stored_checkpoints() -> list[str]:
            listed = store.list_objects_v2(Bucket="streamrl", Prefix=prefix).get("Contents", [])
            return sorted(o["Key"][len(prefix):].split("/")[0] for o in listed if o["Key"].endswith("/MANIFEST.json"))

        def status() -> dict[str, Any]:
            job: dict[str, Any] = api.get(f"{API}/jobs/{job_id}").json()
            assert job["status"] not in ("failed", "cancelled"), f"{job['error']}\n{procs.logs()}"
            return job

        _wait(lambda: status() and stored_checkpoints(), 300, "a checkpoint in the object store", procs)
        driver_host = next(name for name in ("train-a", "train-b")
                           if (root / name / "artifacts" / "jobs" / str(job_id) / "checkpoints").is_dir())
        weights = store.list_objects_v2(Bucket="streamrl", Prefix=f"hosts/teams/{team.id}/jobs/{job_id}/weights/")
        assert any(o["Key"].endswith("/MANIFEST.json") for o in weights.get("Contents", []))  # versions via the store
        procs.stop(driver_host, signal.SIGKILL)  # the host is lost...
        shutil.rmtree(root / driver_host)  # ...with its disk
        final = _wait(lambda: (job := status())["status"] == "succeeded" and job, 420, "the job's end", procs)
        rows = api.get(f"{API}/jobs/{job_id}/iterations").json()["data"]
        events = [e["message"] for e in api.get(f"{API}/jobs/{job_id}/events", params={"limit": 1000}).json()["data"]]
    other = "train-b" if driver_host == "train-a" else "train-a"
    assert final["status"] == "succeeded"
    assert [r["iteration"] for r in rows] == list(range(1, ITERATIONS + 1))  # each iteration exactly once
    assert any("driver resumed from checkpoint" in e for e in events), events
    assert (root / other / "artifacts" / "jobs" / str(job_id) / "checkpoints").is_dir()  # restored on the other host
    assert len(stored_checkpoints()) <= 2  # retention applies in the store
    print(f"RESULT object-store hosts: {driver_host} killed and wiped; resumed on {other}; {len(rows)} iterations")
