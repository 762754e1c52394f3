"""Finished and broken runs written straight into the database the e2e API server reads (no runtime needed): the
job is submitted over REST like a user would, then its status, iterations, events, instances and checkpoints are
recorded through the same services the runtime calls."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from e2e_support import PASSWORD, Api, Server
from sqlalchemy import Engine

from backend.db.enums import TERMINAL_JOB_STATUSES, InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Iteration, Job
from backend.db.session import session_scope
from backend.services.job_data import record_checkpoint, record_iteration, record_spans
from backend.services.jobs import record_event, transition_job


@dataclass
class World:
    api: Api
    token: str
    tag: str


def new_team(server: Server, prefix: str) -> World:
    """A fresh owner + team with the tiny model registered as `tiny`."""
    tag = uuid.uuid4().hex[:8]
    api = Api(server.url)
    session = api.register(f"{prefix}-{tag}@example.com", PASSWORD, f"{prefix}-{tag}")
    api.post("/models", json={"name": "tiny", "path": str(server.tiny_model_dir)})
    return World(api=api, token=session["token"], tag=tag)


def spec(name: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name, "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 32},
        "generation": {"instances": 2, "top_p": 0.9}, "training": {"iterations": 4, "lr": 1e-4},
    }
    for key, value in overrides.items():
        body[key] = {**body[key], **value} if isinstance(value, dict) and key in body else value
    return body


def _set_status(engine: Engine, job_id: int, *path: JobStatus, started_ago_s: float | None = None) -> None:
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        for status in path:
            transition_job(session=session, job=job, to=status)
        if started_ago_s is not None:
            job.started_at = datetime.now(UTC) - timedelta(seconds=started_ago_s)


def finished_run(engine: Engine, world: World, name: str, rewards: list[float], **overrides: Any) -> dict[str, Any]:
    """A succeeded job with one iteration per reward (10 s apart) and an event per iteration."""
    job = world.api.post("/jobs", json=spec(name, **overrides))
    _set_status(engine, job["id"], JobStatus.starting, JobStatus.running, started_ago_s=10 * len(rewards) + 5)
    start = datetime.now(UTC) - timedelta(seconds=10 * len(rewards))
    with session_scope(engine) as session:
        for i, reward in enumerate(rewards, start=1):
            metrics = {"reward_mean": reward, "samples_per_s": 10.0 + i, "iteration_seconds": 10.0, "kl": 0.01 * i,
                       "len_p50": 20.0, "len_p99": 40.0 + i, "reward_errors": 0.0, "gen_seconds": 6.0,
                       "reward_seconds": 0.5}
            row = record_iteration(session=session, job_id=job["id"], iteration=i, metrics=metrics)
            session.flush()
            moment = start + timedelta(seconds=10 * i)
            session.query(Iteration).filter(Iteration.id == row.id).update({"created_at": moment})
            record_event(session=session, job_id=job["id"], kind="iteration", message=f"iteration {i} done")
            t = (start + timedelta(seconds=10 * (i - 1))).timestamp()
            record_spans(session=session, job_id=job["id"], spans=[
                {"lane": "gen-0", "kind": "generating", "start": t, "end": t + 6},
                {"lane": "trainer", "kind": "waiting", "start": t, "end": t + 6},
                {"lane": "trainer", "kind": "training", "start": t + 6, "end": t + 10},
            ])
        if len(rewards) > 2:  # a manual scale decision between iterations 1 and 2 (a marker on the charts)
            scale = record_event(session=session, job_id=job["id"], kind="scale", message="target_instances 2 -> 3",
                                 data={"target_instances": 3})
            scale.created_at = start + timedelta(seconds=15)
    _set_status(engine, job["id"], JobStatus.succeeded)
    return world.api.get(f"/jobs/{job['id']}")


def running_run(engine: Engine, world: World, name: str, **overrides: Any) -> dict[str, Any]:
    job = world.api.post("/jobs", json=spec(name, **overrides))
    _set_status(engine, job["id"], JobStatus.starting, JobStatus.running, started_ago_s=0.0)
    return job


def end_unfinished_jobs(engine: Engine) -> int:
    """Cancel every job not yet finished (the fake running and queued runs earlier tests leave in the shared
    database), so a real runtime started next serves only the jobs submitted after it; how many were cancelled."""
    with session_scope(engine) as session:
        jobs = session.query(Job).filter(Job.status.not_in([s.value for s in TERMINAL_JOB_STATUSES])).all()
        for job in jobs:
            transition_job(session=session, job=job, to=JobStatus.cancelled, error="ended by the e2e runtime fixture")
        return len(jobs)


def add_instances(engine: Engine, job_id: int, instances: list[tuple[str, InstanceStatus, bool]]) -> None:
    """(instance id, status, has a fresh heartbeat)."""
    now = datetime.now(UTC)
    with session_scope(engine) as session:
        for name, status, beating in instances:
            session.add(GenerationInstance(job_id=job_id, instance_id=name, status=status,
                                           heartbeat_at=now if beating else None))


def record(engine: Engine, job_id: int, iteration: int, metrics: dict[str, Any], event: tuple[str, str] | None) -> None:
    with session_scope(engine) as session:
        record_iteration(session=session, job_id=job_id, iteration=iteration, metrics=metrics)
        if event:
            record_event(session=session, job_id=job_id, kind=event[0], message=event[1])


def add_checkpoint(engine: Engine, server: Server, job_id: int, iteration: int) -> Path:
    """A checkpoint directory (a copy of the tiny HF model) under the server's artifact dir, recorded for the job."""
    target = Path(server.env["STREAMRL_ARTIFACT_DIR"]) / "checkpoints" / f"job-{job_id}" / f"iter-{iteration}"
    shutil.copytree(server.tiny_model_dir, target)
    with session_scope(engine) as session:
        record_checkpoint(session=session, job_id=job_id, iteration=iteration, path=str(target))
    return target
