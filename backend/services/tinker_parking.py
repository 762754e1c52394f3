"""Parked Tinker training sessions on the control plane's side (docs/tinker.md#parking; the session's side is
workers/runtime/tinker_serve.py).

A session with no call for `STREAMRL_TINKER_IDLE_S` saves its adapter and optimizer state to disk and exits: its
job is `parked`, holds no training slot and counts against no quota. Here:

    wake(session, client, job)         a call was appended to a parked session's stream: queue the job again (the
                                       controller admits it like any job; the session restores and serves the call)
    worker_lost(session, client, job)  the controller found a session's worker gone (kill -9, OOM; while it ran or
                                       while it restored): park it
                                       at its last automatic park and queue it again if calls wait, or fail it the
                                       MAX_UNPLANNED-th time
    end_abandoned(session, client, a)  the controller ends parked sessions whose SDK session is gone
    parking_info(session, job)         what GET of a training run says about parking and the last restore

Invariant: the job row is locked (FOR UPDATE) before its status is read and changed, so a call's wake, the session's
own wake and the controller's admission never write over each other (a second wake finds the job queued already).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent
from backend.services.jobs import record_event, transition_job
from backend.services.live import wake_controller
from contract import keys, liveness

MAX_UNPLANNED = 3  # a session whose worker is lost this many times in its life fails
PARK_FILE = "park.pt"  # workers/runtime/tinker_park.py


def park_file(artifacts: Path, job: Job) -> Path:
    return Path(artifacts) / "tinker" / str(job.team_id) / str(job.id) / PARK_FILE


def _locked(session: Session, job: Job) -> Job:
    locked = session.scalar(select(Job).where(Job.id == job.id).with_for_update().execution_options(
        populate_existing=True))
    assert locked is not None
    return locked


def wake(session: Session, client: redis.Redis, job: Job) -> bool:
    """parked -> queued, once, after a call reached the job's stream; True when this call woke it."""
    if job.status != JobStatus.parked:
        session.refresh(job)  # the session may have parked since the route read the job
        if job.status != JobStatus.parked:
            return False
    job = _locked(session, job)
    if job.status != JobStatus.parked:
        session.commit()
        return False
    client.set(keys.tinker_woken(job.id), time.time(), nx=True, ex=86400)
    transition_job(session=session, job=job, to=JobStatus.queued)
    record_event(session=session, job_id=job.id, kind="tinker", message="woken by a call: queued for a training slot",
                 data={"tinker": "woken"})
    session.commit()
    wake_controller(client)
    return True


def worker_lost(session: Session, client: redis.Redis, job: Job) -> str | None:
    """A session's worker is gone. Returns the error to fail the job with, or None when it was parked at
    its last automatic park (and queued again when calls wait: the restored session runs the calls served since that
    park again, from its stream). A session that parked itself since the controller read it is left alone."""
    job = _locked(session, job)  # the row as it is now: the session may have parked (and been woken) meanwhile
    if job.status not in (JobStatus.starting, JobStatus.running) or liveness.driver_alive(client, job.id):
        return None
    if job.driver_failures + 1 >= MAX_UNPLANNED:
        return (f"the training session's worker died {job.driver_failures + 1} times; resume from the last "
                "save_state with create_training_client_from_state_with_optimizer")
    job.driver_failures += 1
    transition_job(session=session, job=job, to=JobStatus.parked)
    record_event(session=session, job_id=job.id, kind="tinker", message=(
        "the training session's worker died (no heartbeat): parked at its last automatic park; it resumes from "
        "there and runs the calls made since again"), data={"tinker": "parked", "reason": "worker lost",
                                                             "failures": job.driver_failures})
    client.delete(keys.driver_sent(job.id), keys.driver_seen(job.id), keys.driver_unknown_since(job.id))
    if client.xlen(keys.tinker_requests(job.id)):
        client.set(keys.tinker_woken(job.id), time.time(), nx=True, ex=86400)
        transition_job(session=session, job=job, to=JobStatus.queued)
        record_event(session=session, job_id=job.id, kind="tinker", message="queued again: calls are waiting for it",
                     data={"tinker": "woken"})
    return None


def end_abandoned(session: Session, client: redis.Redis, artifacts: Path) -> list[int]:
    """End the parked sessions whose SDK session is gone (no heartbeat for its TTL: the script or notebook exited
    without ServiceClient.close()), removing their park state; an open notebook's sessions stay parked. Returns the
    ended job ids."""
    ended = []
    for job in session.scalars(select(Job).where(Job.status == JobStatus.parked).with_for_update(skip_locked=True)):
        sdk_session, _, _ = job.name.partition(":train:")
        if client.exists(keys.tinker_session(sdk_session)):
            continue
        record_event(session=session, job_id=job.id, kind="tinker", message=(
            "training session ended while parked: its SDK session is gone (no heartbeat; the script exited without "
            "close()); resume from its last save_state"), data={"tinker": "ended", "reason": "sdk session gone"})
        transition_job(session=session, job=job, to=JobStatus.succeeded)
        park_file(artifacts, job).unlink(missing_ok=True)
        ended.append(job.id)
    return ended


def parking_info(session: Session, job: Job) -> dict[str, Any]:
    """`parked`, and the newest restore's latency (`last_restore_s`, from the call that woke the session to the
    session serving it) with the count of restores."""
    resumed = list(session.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.kind == "tinker")
                                   .order_by(JobEvent.id.desc())))
    restores = [event for event in resumed if (event.data or {}).get("tinker") == "resumed"]
    lost = sum(int((event.data or {}).get("steps_lost", 0)) for event in resumed)
    return {"status": str(job.status), "parked": job.status == JobStatus.parked, "restores": len(restores),
            "last_restore_s": (restores[0].data or {}).get("restore_s") if restores else None, "steps_lost": lost}
