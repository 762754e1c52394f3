"""The cluster as the workers report it (their registry entries and resource samples in Redis, streamrl/worker.py)
and as the database says it should be (instances asked for and not yet running): the cluster page's one answer.

Team scoping: workers are shared, so every team sees every worker and its load, but only its own jobs by id and
name; another team's task is a holder without job id or name. A shared LoRA process serves several jobs: it
names the caller's own jobs among its members (`own_jobs`), so a team's own shared instance is never "another team's".
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Job, Team
from backend.schemas.cluster import ClusterPublic, PendingInstance, PoolPublic, ResourceSample, SlotHolder, WorkerPublic
from contract import keys, tasks

POOLS = ("generation", "training", "control")
SHARED_TASKS = (tasks.RUN_SHARED, tasks.RUN_SHARED_TRAINING)  # their first argument: the process's key
SAMPLES_SHOWN = 360


def _entries(client: redis.Redis) -> list[dict[str, Any]]:
    out = []
    for key in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN, count=100):
        raw = client.get(key)
        if raw is not None:
            out.append(json.loads(raw))
    return sorted(out, key=lambda e: (e.get("queues") or [""])[0] + str(e.get("node")))


def _samples(client: redis.Redis, node: str) -> list[ResourceSample]:
    raw = client.lrange(keys.worker_samples(node), 0, SAMPLES_SHOWN - 1)
    return [ResourceSample.model_validate_json(item) for item in reversed(raw)]


def _shared_members(client: redis.Redis, key: str) -> set[int]:
    """Job ids a shared process serves now: its heartbeat's members ([job_id, instance_id] or job_id) and its joins."""
    raw = client.get(keys.share_state(key))
    members: list[Any] = list(json.loads(raw).get("members") or []) if raw else []
    members += [json.loads(item).get("job_id") for item in client.lrange(keys.share_joins(key), 0, -1)]
    ids = {m[0] if isinstance(m, list) and m else m for m in members}
    return {job_id for job_id in ids if isinstance(job_id, int)}


def _holders(entry: dict[str, Any], names: dict[int, str], client: redis.Redis) -> list[SlotHolder]:
    holders = []
    for task in entry.get("tasks") or []:
        job_id = task.get("job_id")
        if task.get("task") in SHARED_TASKS and isinstance(job_id, str):  # args[0] is the shared process's key
            own_jobs = sorted(_shared_members(client, job_id) & names.keys())
            holders.append(SlotHolder(task=str(task.get("task")), job_id=None, job_name=None, shared=True,
                                      own_jobs=own_jobs))
            continue
        own = isinstance(job_id, int) and job_id in names
        holders.append(SlotHolder(task=str(task.get("task")), job_id=job_id if own else None,
                                  job_name=names[job_id] if own else None,
                                  instance_id=task.get("instance_id") if own else None,
                                  rank=task.get("rank") if own else None))
    return holders


def _pending_reason(pool: PoolPublic | None, waited_s: float) -> str:
    if pool is None or pool.workers == 0:
        return "no generation worker is registered: start one with `streamrl worker --pool generation`"
    if pool.busy >= pool.slots:
        return (f"all {pool.slots} generation slots are busy ({pool.queue_depth} task(s) queued): it starts when one "
                "frees up or a worker is added")
    return f"sent {waited_s:.0f} s ago; a free worker slot should pick it up shortly"


def cluster_view(*, session: Session, client: redis.Redis, team: Team) -> ClusterPublic:
    entries = _entries(client)
    team_jobs = session.execute(select(Job.id, Job.name).where(Job.team_id == team.id)).all()
    names = {job_id: name for job_id, name in team_jobs}
    now = time.time()
    workers = [
        WorkerPublic(
            node=str(entry.get("node")), host=str(entry.get("host", "")), pools=list(entry.get("queues") or []),
            slots=int(entry.get("slots", 0)), busy=len(entry.get("tasks") or []),
            device_kind=entry.get("device_kind"), devices=list(entry.get("devices") or []),
            holders=_holders(entry, names, client),
            beat_age_s=round(now - float(entry["beat_at"]), 1) if entry.get("beat_at") else None,
            samples=_samples(client, str(entry.get("node"))),
        )
        for entry in entries
    ]
    pools = []
    for pool in POOLS:
        serving = [w for w in workers if pool in w.pools]
        pools.append(PoolPublic(pool=pool, workers=len(serving), slots=sum(w.slots for w in serving),
                                busy=sum(w.busy for w in serving), queue_depth=int(client.llen(pool))))
    generation = next((p for p in pools if p.pool == "generation"), None)
    rows = session.execute(
        select(GenerationInstance, Job.name).join(Job, Job.id == GenerationInstance.job_id).where(
            Job.team_id == team.id, Job.status.in_([JobStatus.starting, JobStatus.running]),
            GenerationInstance.status == InstanceStatus.starting, GenerationInstance.heartbeat_at.is_(None),
        ).order_by(GenerationInstance.started_at)
    ).all()
    pending = []
    for inst, name in rows:
        started = inst.started_at if inst.started_at.tzinfo else inst.started_at.replace(tzinfo=UTC)
        waited = (datetime.now(UTC) - started).total_seconds()
        pending.append(PendingInstance(job_id=inst.job_id, job_name=name, instance_id=inst.instance_id,
                                       waited_s=round(waited, 1), reason=_pending_reason(generation, waited)))
    return ClusterPublic(pools=pools, workers=workers, pending=pending)
