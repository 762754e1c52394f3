"""The platform as it runs across hosts, on one machine: the API (uvicorn) and the controller (`streamrl controller`)
against the PostgreSQL and Redis servers, two generation and two training workers as separate `streamrl worker`
processes with their own node names and device sets, and a 2-rank, 2-instance async job with p2p weight sync that
a user submits through the REST API. One generation worker is stopped mid-job; the job still completes, every
iteration once, each with its full sample count."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import redis
from runtime_platform import REPO, base_spec, wait_until
from sqlalchemy import select
from waiting import environ_snapshot, stop_process_groups

from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus, Model
from backend.db.enums import TERMINAL_JOB_STATUSES
from contract import keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]
API = "/api/v1"
ITERATIONS, PROMPTS, GROUP = 10, 4, 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """Every process of the stack, each in its own session (a process group to stop), logs under `log_dir`."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env, self.log_dir = env, log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *argv: str, env: dict[str, str] | None = None) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen([sys.executable, *argv], cwd=REPO, env={**self.env, **(env or {})},
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def logs(self, chars: int = 2500) -> str:
        return "\n".join(f"--- {path.stem} ---\n{path.read_text(errors='replace')[-chars:]}"
                         for path in sorted(self.log_dir.glob("*.log")))


@pytest.fixture(scope="module")
def cluster(pg_backend: Any, redis_url: str, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Cluster, str, dict[str, str], Any]]:
    with pg_backend.session() as session:  # the database is shared with earlier modules: their jobs are not ours
        for job in session.scalars(select(Job).where(Job.status.not_in(TERMINAL_JOB_STATUSES))):
            job.status = JobStatus.cancelled
    team = pg_backend.make_team(max_concurrent_jobs=2, max_generation_instances=8)
    user = pg_backend.make_user(team)
    with pg_backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(tiny_model_dir), created_by_id=user.id))
    data_dir = tmp_path_factory.mktemp("multi-host")
    env = {**environ_snapshot(), "STREAMRL_DATABASE_URL": pg_backend.url, "STREAMRL_REDIS_URL": redis_url,
           "STREAMRL_DATA_DIR": str(data_dir), "STREAMRL_SECRET_KEY": pg_backend.settings.secret_key,
           "STREAMRL_AUTO_MIGRATE": "false", "STREAMRL_DEVICE": "cpu", "PYTHONPATH": str(REPO),
           "TOKENIZERS_PARALLELISM": "false", "STREAMRL_INSTANCE_HEARTBEAT_TIMEOUT_S": "8",
           "STREAMRL_RANK_HOST": "127.0.0.1", "STREAMRL_P2P_HOST": "127.0.0.1"}
    cluster = Cluster(env, data_dir)
    port = _free_port()
    cluster.start("api", "-m", "uvicorn", "backend.main:create_app", "--factory", "--port", str(port))
    cluster.start("controller", "-m", "streamrl.cli.main", "controller", "--interval", "0.5")
    for name, pool, cores in (("gen-a", "generation", "0"), ("gen-b", "generation", "1"),
                              ("train-a", "training", "0"), ("train-b", "training", "1")):
        cluster.start(name, "-m", "streamrl.cli.main", "worker", "--pool", pool, "--devices", cores)
    try:
        yield cluster, f"http://127.0.0.1:{port}", pg_backend.auth_headers(user, team), pg_backend
    finally:
        stop_process_groups([cluster.procs.pop(name) for name in list(cluster.procs)])


def _wait(predicate: Any, timeout_s: float, what: str, cluster: Cluster) -> Any:
    return wait_until(predicate, timeout_s, what, cluster.logs)


def test_two_ranks_two_instances_p2p_across_worker_processes(cluster: tuple[Cluster, str, dict[str, str], Any]
                                                            ) -> None:
    procs, url, headers, backend = cluster
    redis_url = procs.env["STREAMRL_REDIS_URL"]
    spec = base_spec(
        name="multi-host", mode="async", max_staleness=1,
        generation={"instances": 2, "batch_size": 16, "max_tokens": 8},
        training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS, "micro_batch_size": 8, "lr": 1e-3,
                  "devices": 2, "weight_sync": "p2p"},
        algorithm={"name": "grpo", "group_size": GROUP},
    )
    with httpx.Client(base_url=url, headers=headers, timeout=30) as api:
        _wait(lambda: _healthy(api), 60, "the API", procs)
        submitted = api.post(f"{API}/jobs", json=spec)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]

        def progress() -> int:
            job = api.get(f"{API}/jobs/{job_id}").json()
            assert job["status"] not in ("failed", "cancelled"), f"{job['error']}\n{procs.logs()}"
            return int(job["progress"]["iteration"])

        _wait(lambda: progress() >= 3, 300, "iteration 3", procs)
        workers_of_instances = _instance_workers(procs, backend, redis_url, job_id)
        procs.stop("gen-a")  # an operator takes one generation host away mid-job (warm shutdown)
        stopped_at = progress()
        final = _wait(lambda: (job := api.get(f"{API}/jobs/{job_id}").json())["status"] in (
            "succeeded", "failed", "cancelled") and job, 420, "the job's end", procs)
        assert final["status"] == "succeeded", f"{final['error']}\n{procs.logs()}"
        rows = api.get(f"{API}/jobs/{job_id}/iterations").json()["data"]
        events = [e["message"] for e in api.get(f"{API}/jobs/{job_id}/events", params={"limit": 1000}).json()["data"]]
    assert [r["iteration"] for r in rows] == list(range(1, ITERATIONS + 1))  # each iteration exactly once
    assert all(r["metrics"]["samples"] == PROMPTS * GROUP for r in rows)
    assert workers_of_instances == {"gen-a", "gen-b"}  # the two instances ran on the two generation workers
    assert any("2 ranks" in e for e in events), events
    print(f"RESULT multi-host: 2 ranks, 2 instances, p2p; generation worker stopped at iteration {stopped_at}; "
          f"job succeeded with {len(rows)} iterations")


def _instance_workers(procs: Cluster, backend: Any, redis_url: str, job_id: int) -> set[str]:
    """Which worker processes run the job's live instances (the pid in each instance's heartbeat is a task process,
    a child of one `streamrl worker`)."""
    with backend.session() as session:
        ids = list(session.scalars(select(GenerationInstance.instance_id).where(
            GenerationInstance.job_id == job_id, GenerationInstance.status == InstanceStatus.running)))
    client = redis.Redis.from_url(redis_url)
    try:
        pids = {json.loads(raw)["pid"] for iid in ids if (raw := client.get(keys.instance_heartbeat(job_id, iid)))}
    finally:
        client.close()
    return {name for name, proc in procs.procs.items() if name.startswith("gen-")
            and pids & {child.pid for child in psutil.Process(proc.pid).children(recursive=True)}}


def _healthy(api: httpx.Client) -> bool:
    try:
        return api.get(f"{API}/health").status_code == 200
    except httpx.TransportError:
        return False
