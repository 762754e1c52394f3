"""A whole platform for integration tests: real Postgres + Redis, Celery worker PROCESSES for the generation and
training pools, and the controller's reconcile loop (a thread of the test process, same code as `streamrl controller`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis
from sqlalchemy import select, update
from waiting import environ_snapshot, stop_process_groups

from backend.controller.reconcile import CeleryTaskSender, reconcile_once
from backend.db import GenerationInstance, Iteration, Job, JobEvent, JobStatus, Model, Team, User
from backend.db.enums import LIVE_INSTANCE_STATUSES, TERMINAL_JOB_STATUSES
from backend.db.models.deployments import Deployment
from backend.db.models.evaluations import Evaluation
from backend.services.jobs import create_job, scale_job
from contract import keys
from contract.liveness import Timeouts
from contract.spec import JobSpec
from contract.tasks import TASK_ROUTES

REPO = Path(__file__).resolve().parents[2]
TEST_TIMEOUTS = Timeouts(instance_heartbeat_s=6.0, instance_start_s=180.0, driver_start_s=180.0,
                         driver_heartbeat_ttl_s=60.0)


def forget_earlier_work(backend: Any, client: redis.Redis) -> None:
    """The database and the broker's Redis db are shared with earlier test modules of this process: their unfinished
    jobs and evaluations are not ours, their deployments keep no replica, and the tasks they left queued (an
    evaluation sent after its module's workers stopped) must not take this platform's worker slots (one did: a
    generation slot held for 78 s by another module's evaluation, so a test's fourth instance never got its place)."""
    with backend.session() as session:  # set-based: no ORM objects loaded (nor iterated while they change)
        session.execute(update(Job).where(Job.status.not_in(TERMINAL_JOB_STATUSES)).values(status=JobStatus.cancelled))
        session.execute(update(Evaluation).where(Evaluation.status.in_(["queued", "running"]))
                        .values(status="failed", error="left by an earlier test module"))
        session.execute(update(Deployment).where(Deployment.min_replicas > 0).values(min_replicas=0))
    queues = {route["queue"] for route in TASK_ROUTES.values()}
    # kombu's Redis transport keeps a queue as a list named after it (one per priority step: name + sep + step)
    stale = [key for key in client.scan_iter(count=500)
             if key.decode(errors="replace").split("\x06\x16", 1)[0] in queues and client.type(key) == b"list"]
    if stale:
        client.delete(*stale)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, logs: Callable[[], str] = str,
               *, errors_ok: bool = False) -> Any:
    """Poll `predicate` every 0.25 s until it returns something truthy, and return that; after `timeout_s` an
    AssertionError names `what` and ends with `logs()`. `errors_ok`: an exception from the predicate counts as "not
    yet" (a server the test restarts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:
            if not errors_ok:
                raise
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{logs()}")


def base_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "it", "model": "tiny", "mode": "sync", "seed": 0,
        "dataset": {"builtin": "arithmetic", "num_prompts": 16, "eval_prompts": 0},
        "reward": {"type": "exact_match"},
        "algorithm": {"name": "grpo", "group_size": 4},
        "generation": {"instances": 2, "batch_size": 16, "max_tokens": 8, "temperature": 1.0},
        "training": {"iterations": 3, "prompts_per_iteration": 4, "micro_batch_size": 8, "lr": 1e-3},
        "checkpoint": {"interval": 100},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


@dataclass
class Platform:
    backend: Any  # tests/conftest.py Backend
    redis_url: str
    env: dict[str, str]
    team: Any
    user: Any
    client: redis.Redis
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    controller_errors: list[str] = field(default_factory=list)
    timeouts: Timeouts = TEST_TIMEOUTS

    @classmethod
    @contextmanager
    def start(cls, backend: Any, redis_url: str, model_dir: Path, timeouts: Timeouts = TEST_TIMEOUTS,
              extra_env: dict[str, str] | None = None, generation_slots: int = 3,
              start_workers: bool = True) -> Iterator[Platform]:
        """`start_workers=False`: the test starts the pools' workers itself (into `workers`) as it needs them."""
        forget_earlier_work(backend, redis.Redis.from_url(redis_url))
        team = backend.make_team(max_concurrent_jobs=4, max_generation_instances=8)
        user = backend.make_user(team)
        with backend.session() as session:
            session.add(Model(team_id=team.id, name="tiny", path=str(model_dir), created_by_id=user.id))
        data_dir = Path(backend.settings.data_dir)
        env = {**environ_snapshot(), "STREAMRL_DATABASE_URL": backend.url, "STREAMRL_REDIS_URL": redis_url,
               "STREAMRL_DATA_DIR": str(data_dir), "STREAMRL_SECRET_KEY": backend.settings.secret_key,
               "STREAMRL_AUTO_MIGRATE": "false", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO), **(extra_env or {})}
        platform = cls(backend=backend, redis_url=redis_url, env=env, team=team, user=user,
                       client=redis.Redis.from_url(redis_url), timeouts=timeouts)
        if start_workers:
            platform.start_worker("generation", concurrency=generation_slots)
            platform.start_worker("training", concurrency=2)
            for pool in ("generation", "training"):  # tests may ask at once for what only a registered worker serves
                platform.wait_registered(pool)
        thread = threading.Thread(target=platform._control_loop, daemon=True)
        thread.start()
        try:
            yield platform
        finally:
            platform._stop.set()
            thread.join(timeout=10)
            # the test is over: its workers' running tasks need not hand work back (tests of a graceful stop use
            # stop_worker); tasks are acknowledged on receipt (contract/tasks.py), so none is delivered again
            stop_process_groups([platform.workers.pop(name) for name in list(platform.workers)])
            platform.client.close()

    # -- processes ----------------------------------------------------------------------------------------------------
    def start_worker(self, pool: str, concurrency: int) -> None:
        log = open(Path(self.env["STREAMRL_DATA_DIR"]) / f"worker-{pool}.log", "ab")  # noqa: SIM115
        self.nodes[pool] = f"{pool}-{os.getpid()}-{uuid.uuid4().hex[:6]}"  # a node name of its own: no stale flags
        self.workers[pool] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "streamrl.worker:app", "worker", "-Q", pool,
             "--concurrency", str(concurrency), "--pool", "prefork", "-n", f"{self.nodes[pool]}@%h",
             "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_registered(self, pool: str, timeout_s: float = 180) -> None:
        """Until the pool's worker (started by start_worker) has written its registry entry."""
        pattern = keys.worker_registry(f"{self.nodes[pool]}@*")
        wait_until(lambda: next(self.client.scan_iter(match=pattern, count=100), None) is not None, timeout_s,
                   f"the {pool} worker registers", logs=self.logs_tail)

    def task_process_maps(self, pool: str) -> list[str]:
        """The memory maps (/proc/PID/maps: every shared object loaded) of the pool worker's task processes."""
        return [Path(f"/proc/{child.pid}/maps").read_text()
                for child in psutil.Process(self.workers[pool].pid).children()]

    def stop_worker(self, pool: str) -> None:
        """A warm shutdown of one pool's worker: 20 s to hand its tasks back before SIGKILL."""
        stop_process_groups([self.workers.pop(pool)], grace_s=20)

    def _control_loop(self) -> None:
        sender = CeleryTaskSender(self.redis_url)
        while not self._stop.wait(0.5):
            try:
                reconcile_once(sender=sender, client=self.client, timeouts=self.timeouts, engine=self.backend.engine)
            except Exception as exc:  # surfaced by the tests' assertions
                self.controller_errors.append(repr(exc))

    # -- jobs ---------------------------------------------------------------------------------------------------------
    def submit(self, stored_overrides: dict[str, Any] | None = None, **overrides: Any) -> int:
        """Submit through the service (all submit checks); `stored_overrides` then change the stored spec in the same
        transaction, bypassing those checks (a spec an older platform version accepted)."""
        spec = JobSpec.model_validate(base_spec(**overrides))
        with self.backend.session() as session:
            team, user = session.get(Team, self.team.id), session.get(User, self.user.id)
            assert team is not None and user is not None
            job = create_job(session=session, team=team, user=user, spec=spec)
            if stored_overrides:
                job.spec = {**job.spec, **stored_overrides}
            return int(job.id)

    def other_team(self, **quotas: int) -> tuple[Team, User]:
        """A second team and its user, with the same base model registered as "tiny" (the same directory)."""
        team = self.backend.make_team(**quotas)
        user = self.backend.make_user(team)
        with self.backend.session() as session:
            base = session.scalar(select(Model.path).where(Model.team_id == self.team.id, Model.name == "tiny"))
            session.add(Model(team_id=team.id, name="tiny", path=base, created_by_id=user.id))
        return team, user

    def submit_as(self, team: Any, user: Any, spec: dict[str, Any]) -> int:
        """Submit a full spec as another team's user (a team made with backend.make_team)."""
        with self.backend.session() as session:
            job = create_job(session=session, team=session.get(Team, team.id), user=session.get(User, user.id),
                             spec=JobSpec.model_validate(spec))
            return int(job.id)

    def job(self, job_id: int) -> Job:
        with self.backend.session() as session:
            job = session.get(Job, job_id)
            assert job is not None
            return job

    def wait_status(self, job_id: int, statuses: set[JobStatus], timeout_s: float) -> Job:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            job = self.job(job_id)
            if job.status in statuses:
                return job
            if job.status in TERMINAL_JOB_STATUSES:
                raise AssertionError(f"job {job_id} ended {job.status}: {job.error}\n{self.logs_tail()}")
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} still {self.job(job_id).status} after {timeout_s}s; controller errors "
                             f"{self.controller_errors[-3:]}\n{self.logs_tail()}")

    def wait_done(self, job_id: int, timeout_s: float = 300) -> Job:
        job = self.wait_status(job_id, {JobStatus.succeeded}, timeout_s)
        return job

    def iterations(self, job_id: int) -> list[dict[str, Any]]:
        with self.backend.session() as session:
            return [dict(m) for m in session.scalars(select(Iteration.metrics).where(Iteration.job_id == job_id)
                                                       .order_by(Iteration.iteration))]

    def live_instances(self, job_id: int, running_only: bool = False) -> list[str]:
        statuses = ["running"] if running_only else list(LIVE_INSTANCE_STATUSES)
        with self.backend.session() as session:
            return list(session.scalars(select(GenerationInstance.instance_id).where(
                GenerationInstance.job_id == job_id, GenerationInstance.status.in_(statuses))
                .order_by(GenerationInstance.id)))

    def statuses(self, job_id: int) -> dict[str, str]:
        with self.backend.session() as session:
            rows = session.scalars(select(GenerationInstance).where(GenerationInstance.job_id == job_id))
            return {r.instance_id: str(r.status) for r in rows}

    def scale(self, job_id: int, target: int) -> None:
        with self.backend.session() as session:
            job = session.get(Job, job_id)
            scale_job(session=session, team=session.get(Team, self.team.id), job=job, target_instances=target,
                      autoscale=False)

    def instance_info(self, job_id: int, instance_id: str) -> dict[str, Any] | None:
        raw = self.client.get(keys.instance_heartbeat(job_id, instance_id))
        return json.loads(raw) if raw else None

    def driver_pid(self, job_id: int) -> int | None:
        raw = self.client.get(keys.driver_heartbeat(job_id))
        return int(json.loads(raw)["pid"]) if raw else None

    def events(self, job_id: int) -> list[str]:
        with self.backend.session() as session:
            return list(session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)
                                        .order_by(JobEvent.id)))

    def consumed(self, job_id: int) -> set[str]:
        return {m.decode() for m in self.client.smembers(keys.consumed_set(job_id))}  # type: ignore[union-attr]

    def logs_tail(self, chars: int = 3000) -> str:
        out = []
        for pool in ("generation", "training"):
            path = Path(self.env["STREAMRL_DATA_DIR"]) / f"worker-{pool}.log"
            if path.exists():
                out.append(f"--- {pool} ---\n" + path.read_text(errors="replace")[-chars:])
        try:  # what the controller decided (instances replaced, scaled, preempted) says more than the workers' logs
            with self.backend.session() as session:
                events = list(session.execute(select(JobEvent.job_id, JobEvent.kind, JobEvent.message)
                                              .order_by(JobEvent.id.desc()).limit(25)))
            out.append("--- newest job events ---\n" + "\n".join(f"job {e[0]} {e[1]}: {e[2]}" for e in events[::-1]))
        except Exception as exc:  # the database may be what the test stopped
            out.append(f"--- job events unreadable: {exc} ---")
        return "\n".join(out)
