"""Worker capacity per pool, from the registry live Celery workers keep in Redis (streamrl/worker.py).

A generation slot runs one instance; an instance is `pending` from the moment the controller asks for it until a
worker slot picks its task up (its first heartbeat). `free_generation_slots` is None when no worker registered
(e.g. a deployment whose workers predate the registry): the controller then cannot judge capacity and waits.

A training slot runs one job driver or one trainer rank; a job holds `training.devices` of them from admission until
it ends (paused jobs keep theirs: the driver waits in place). Jobs that share training hold one slot per shared
training process (up to `shared_training_jobs()` drivers each, fewer when its memory says so). `training_slots` is
None without registered training workers, and admission then does not judge the training pool.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from backend.controller import sharing
from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES
from backend.services.jobs import TrainingSlots, job_devices
from contract import keys
from contract.sharing import stored_spec_shares_training


@dataclass(frozen=True)
class PoolCapacity:
    slots: int  # registered worker processes serving the pool
    in_use: int  # instances holding a slot (picked up and not yet stopped)

    @property
    def free(self) -> int:
        return max(0, self.slots - self.in_use)


def queued_ahead(session: Session, job_id: int, since: datetime) -> int:
    """Other jobs' instances sent to the generation pool no later than `since` and not picked up yet: a free slot
    goes to them first (the queue is first come, first served). Instances placed on a shared process hold none."""
    return int(session.scalar(select(func.count(GenerationInstance.id)).where(
        GenerationInstance.job_id != job_id, GenerationInstance.heartbeat_at.is_(None),
        GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES), GenerationInstance.started_at <= since,
        or_(GenerationInstance.celery_task_id.is_(None),
            GenerationInstance.celery_task_id.not_like(f"{sharing.TASK_PREFIX}%")))) or 0)


def registered_slots(client: redis.Redis, queue: str) -> int | None:
    total, seen = 0, False
    for key in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN, count=100):
        raw = client.get(key)
        if raw is None:
            continue
        entry = json.loads(raw)
        if queue in entry.get("queues", []):
            total, seen = total + int(entry.get("slots", 0)), True
    return total if seen else None


def generation_capacity(session: Session, client: redis.Redis, heartbeat_s: float) -> PoolCapacity | None:
    """Registered generation slots, and the instances holding one (a heartbeat within `heartbeat_s`)."""
    slots = registered_slots(client, "generation")
    if slots is None:
        return None
    recent = datetime.now(UTC) - timedelta(seconds=heartbeat_s)
    in_use = session.scalar(select(func.count(GenerationInstance.id)).where(
        GenerationInstance.heartbeat_at >= recent,
        GenerationInstance.status.in_([InstanceStatus.starting, InstanceStatus.running, InstanceStatus.stopping])))
    return PoolCapacity(slots=slots, in_use=int(in_use or 0))


def training_slots(session: Session, client: redis.Redis) -> TrainingSlots | None:
    """Registered training slots, and how many the starting, running and paused jobs' gangs leave free."""
    slots = registered_slots(client, "training")
    if slots is None:
        return None
    holding = list(session.scalars(select(Job).where(Job.status.in_([JobStatus.starting, JobStatus.running,
                                                                     JobStatus.paused]))))
    placed = {job.id: (base, key) for job, base, key in sharing.sharing_drivers(session, client, holding)}
    in_use = sum(job_devices(job) for job in holding if job.id not in placed)
    per_process = Counter(key for _, key in placed.values() if key is not None)
    bases = {key: base for base, key in placed.values() if key is not None}
    in_use += len(per_process) + sum(1 for _, key in placed.values() if key is None)  # not placed yet: a process each
    room: dict[str, int] = {}
    for key, drivers in per_process.items():
        room[bases[key]] = room.get(bases[key], 0) + sharing.process_room(client, key, drivers)

    def shared_base(job: Job) -> str | None:
        return sharing.base_model_dir(session, job) if stored_spec_shares_training(job.spec) else None

    return TrainingSlots(slots=slots, free=max(0, slots - in_use), room=room, shared_base=shared_base)
