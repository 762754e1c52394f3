"""Stall and recovery as job events (kinds `stalled`, `recovered` in contract/events.py), so alert rules and the
events log see them: a running job with no new iteration for its stall limit (backend/services/health.py) is noted
once, with its cause, until iterations come again."""

from __future__ import annotations

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job
from backend.schemas.dashboard import JobHealth
from backend.services.health import jobs_health
from backend.services.jobs import record_event
from contract import events, keys

NOTE_TTL_S = 7 * 86400


def stall_cause(health: JobHealth) -> str:
    """What the facts say about why: instances not running, the newest error."""
    inst = health.instances
    parts = [f"{inst.running} of {inst.target} generation instances running"] if inst.target else []
    parts += [f"{inst.pending} pending"] if inst.pending else []
    parts += [f"{inst.silent} silent"] if inst.silent else []
    parts += [f"{inst.dead_recent} died recently"] if inst.dead_recent else []
    if health.state not in ("stalled", "generating", "waiting_for_instances"):
        parts.append(health.summary)
    if health.latest_error:
        parts.append(f"latest error: {health.latest_error[:300]}")
    return "; ".join(parts) or "no cause recorded"


def note_stalls(session: Session, client: redis.Redis) -> list[int]:
    """Record `stalled` for running jobs that just crossed their stall limit and `recovered` for noted jobs that
    made an iteration since; the ids of the jobs noted now."""
    jobs = list(session.scalars(select(Job).where(Job.status == JobStatus.running)))
    noted: list[int] = []
    for job in jobs:
        health = jobs_health(session=session, jobs=[job])[job.id]
        key = keys.noted(job.id, "stalled")
        since = health.seconds_since_progress
        if since is not None and since > health.stall_after_s:
            if client.set(key, job.current_iteration, nx=True, ex=NOTE_TTL_S):
                record_event(session=session, job_id=job.id, kind=events.STALLED,
                             message=f"stalled: no iteration for {since:.0f} s (limit {health.stall_after_s:.0f} s); "
                                     f"{stall_cause(health)}",
                             data={"seconds_since_progress": round(since, 1), "limit_s": health.stall_after_s,
                                   "iteration": job.current_iteration})
                noted.append(job.id)
        elif client.delete(key):
            record_event(session=session, job_id=job.id, kind=events.RECOVERED,
                         message=f"progress again after a stall: iteration {job.current_iteration}",
                         data={"iteration": job.current_iteration})
    return noted
