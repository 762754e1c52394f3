"""Generation leases: generation slots taken outside the jobs' own instances, through the scheduler's accounting.

    if try_acquire(session, client, team_id=3, lease="eval:17", kind="evaluation", ttl_s=3600).granted: send it
    refresh(client, "deploy-4.r0", ttl_s=10)   # a replica's heartbeat keeps its lease
    release(client, "eval:17")

Deployment replicas and evaluation runners are Celery tasks on the generation pool: each holds one worker slot while
it runs. A lease says so to the scheduler (backend/services/admission.py): the pass counts every live lease as a
non-preemptible item of its team holding one generation slot, so jobs are admitted and scaled on the slots that are
really free, leased slots count in the team's fair share, and `max_generation_instances` bounds leases and job
instances together. A lease is granted only while a slot is free (registered generation slots minus the job
instances holding or waiting for one minus live leases) and the team's cap allows it; without registered generation
workers nothing can be judged and every lease is granted (as the scheduler does with jobs). Leases expire at
`until` unless refreshed, so a holder that died gives its slot back. Grants are serialized by a short Redis lock.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus, Team
from contract import keys
from contract.leases import Lease, live, put, refresh, release

__all__ = ["Grant", "Lease", "by_team", "live", "refresh", "release", "try_acquire"]

LOCK_S = 5


@dataclass(frozen=True)
class Grant:
    granted: bool
    reason: str = ""  # why not: the pool is full, or the team's cap


def live_job_instances(session: Session) -> int:
    """Job instances holding a generation slot or waiting for one (asked for, not stopped) of jobs that are still
    starting or running: an ended job's instance rows hold no slot, whatever status they were left in."""
    live = [InstanceStatus.starting, InstanceStatus.running, InstanceStatus.stopping]
    return int(session.scalar(
        select(func.count(GenerationInstance.id)).join(Job, Job.id == GenerationInstance.job_id).where(
            GenerationInstance.status.in_(live), Job.status.in_([JobStatus.starting, JobStatus.running]))) or 0)


def _generation_slots(client: redis.Redis) -> int | None:
    """Slots of the registered generation workers (None: none registered), as the controller counts them."""
    total, seen = 0, False
    for name in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN, count=100):
        raw = client.get(name)
        if raw is not None:
            entry = json.loads(raw)
            if "generation" in entry.get("queues", []):
                total, seen = total + int(entry.get("slots", 0)), True
    return total if seen else None


def _team_generation(session: Session, team_id: int) -> int:
    jobs = session.scalars(select(Job).where(Job.team_id == team_id, Job.status.in_(
        [JobStatus.starting, JobStatus.running]))).all()
    return sum(job.target_instances for job in jobs if job.spec.get("mode") != "colocated")


def try_acquire(session: Session, client: redis.Redis, *, team_id: int, lease: str, kind: str,
                ttl_s: float) -> Grant:
    """Take one generation slot for `lease` if one is free and the team's cap allows; holding it already: granted."""
    lock = client.lock(keys.generation_lease_lock(), timeout=LOCK_S, blocking_timeout=LOCK_S)
    if not lock.acquire():
        return Grant(False, "the generation pool's lease lock is busy")
    try:
        leases = live(client)
        if any(held_lease.id == lease for held_lease in leases):
            refresh(client, lease, ttl_s)
            return Grant(True)
        team = session.get(Team, team_id)
        cap = team.max_generation_instances if team is not None else None
        if cap is not None:
            in_use = _team_generation(session, team_id) + sum(1 for x in leases if x.team_id == team_id)
            if in_use + 1 > cap:
                return Grant(False, f"the team's quota max_generation_instances ({cap}) is in use ({in_use})")
        slots = _generation_slots(client)
        if slots is not None:
            used = live_job_instances(session) + len(leases)
            if used >= slots:
                return Grant(False, f"waiting for a generation slot: {slots} in the pool, {used} in use")
        put(client, lease, team_id, kind, ttl_s)
        return Grant(True)
    finally:
        with contextlib.suppress(redis.exceptions.LockError):  # it expired meanwhile
            lock.release()


def by_team(leases: list[Lease]) -> dict[int, int]:
    out: dict[int, int] = {}
    for lease in leases:
        out[lease.team_id] = out.get(lease.team_id, 0) + 1
    return out
