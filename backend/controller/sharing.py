"""Placing the instances of sharing LoRA jobs (`JobSpec.shares_generation`) on shared generation instances, and the
drivers of jobs that share training (`JobSpec.shares_training`) on shared training processes (last section).

A shared instance is one process of the generation pool (workers/runtime/shared.py) that holds one base model and
serves the instances of every LoRA job placed on it, of any team, each with its own adapter, prompt and sample
streams. Its key is a hash of the base model's directory (the team's registered model path, or the model directory
the spec names) and the engine settings that must agree (`share_settings`: the engine; for vLLM its settings and
LoRA rank class), plus a slot: a job's k-th instance goes to slot k, so the instances of one job spread over
processes as a private job's would and the jobs on one base model meet in each. Jobs meet only on the same
directory: two teams that registered the same files in two places do not share.

Placing is: append {job_id, instance_id, weight} to the key's joins list (weight: the team's
max_generation_instances quota, the job's share of the process's turns: workers/runtime/fair_share.py), then send
`generation.run_shared(key)` unless its process is alive or on its way. That process removes its state only together
with an empty joins list (atomically), so either it sees the placement or the controller sees it gone and starts a
new one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db import Job, JobStatus, Team
from backend.services.jobs import shared_training_jobs
from backend.services.models import job_model
from contract import keys
from contract.sharing import stored_spec_shares_training
from contract.spec import JobSpec

START_MARKER_S = 120  # a sent shared instance that has not beaten this long is sent again


class SharedSender(Protocol):
    def start_shared(self, key: str) -> str: ...

    def start_shared_training(self, key: str) -> str: ...


def base_model_dir(session: Session, job: Job) -> str:
    """The base model's directory (`spec.model`) as the job's workers will resolve it (workers/runtime/context.py)."""
    name = str(job.spec["model"])
    model = job_model(session, job)
    if model is not None:
        return str(Path(model.path).resolve())
    return str(Path(name).expanduser().resolve())


def share_key(base_dir: str, settings: str, slot: int) -> str:
    """The shared instance of a base model directory, engine settings (`contract.sharing.share_settings`) and slot."""
    return f"{hashlib.sha256(f'{settings}|{base_dir}'.encode()).hexdigest()[:16]}-{slot}"


def share_weight(session: Session, job: Job) -> int:
    """The job's share of a shared instance's turns: its team's generation-instance quota (a team entitled to 8
    instances gets 4 turns for each of a team entitled to 2)."""
    team = session.get(Team, job.team_id)
    return max(1, team.max_generation_instances) if team is not None else 1


TASK_PREFIX = "shared:"  # an instance row's celery_task_id on a shared instance: this prefix + its key


def place_instance(session: Session, client: redis.Redis, sender: SharedSender, job: Job, spec: JobSpec,
                   instance_id: str, slot: int) -> str:
    """Put the job's instance on the shared instance of its base model and slot; returns that key."""
    key = share_key(base_model_dir(session, job), spec.share_settings, slot)
    client.rpush(keys.share_joins(key), json.dumps({"job_id": job.id, "instance_id": instance_id,
                                                    "weight": share_weight(session, job)}))
    ensure_shared(client, sender, key)
    return key


def ensure_shared(client: redis.Redis, sender: SharedSender, key: str) -> None:
    """Send the shared process's task (`generation.run_shared`, or `training.run_shared` for a training key) unless
    its process beats or a task is on its way. Called at placement and, for members still waiting, at every pass: a
    process that died (kill -9) is replaced once its state expires."""
    if not client.exists(keys.share_state(key)) and \
            client.set(keys.share_starting(key), 1, nx=True, ex=START_MARKER_S):
        if key.startswith(TRAINING_PREFIX):
            sender.start_shared_training(key)
        else:
            sender.start_shared(key)


# -- shared training processes -----------------------------------------------------------------------------------------
TRAINING_PREFIX = "train-"


def training_key(base_dir: str, slot: int) -> str:
    """The shared training process of a base model directory and slot (up to `shared_training_jobs()` drivers)."""
    return TRAINING_PREFIX + share_key(base_dir, "training", slot)


def placed_key(client: redis.Redis, job_id: int) -> str | None:
    """The shared training process the job's driver was placed on (`keys.driver_share`), if any."""
    raw = client.get(keys.driver_share(job_id))
    return raw.decode() if isinstance(raw, bytes) else raw


def sharing_drivers(session: Session, client: redis.Redis,
                    holding: Iterable[Job] | None = None) -> list[tuple[Job, str, str | None]]:
    """(job, base model dir, placed key or None) of every job that shares training among `holding` (default: the
    starting, running and paused jobs)."""
    if holding is None:
        holding = session.scalars(select(Job).where(Job.status.in_([JobStatus.starting, JobStatus.running,
                                                                    JobStatus.paused])))
    return [(job, base_model_dir(session, job), placed_key(client, job.id))
            for job in holding if stored_spec_shares_training(job.spec)]


def process_room(client: redis.Redis, key: str, drivers: int) -> int:
    """More drivers the shared training process `key` takes, holding `drivers` placed ones: up to
    `shared_training_jobs()` in all, and no more than the memory room its heartbeat reports
    (workers/runtime/shared_training.py `MemoryRoom`; none reported: the count alone)."""
    left = shared_training_jobs() - drivers
    raw = client.get(keys.share_state(key))
    reported = json.loads(raw).get("room") if raw else None
    return max(0, left if reported is None else min(left, int(reported)))


def place_driver(session: Session, client: redis.Redis, sender: SharedSender, job: Job, spec: JobSpec) -> str:
    """Put the job's driver on a shared training process of its base model: the one it was placed on before (a
    restarted driver goes back), else the lowest slot with room (`process_room`: fewer than `shared_training_jobs()`
    drivers, and memory for another). Returns that process's key."""
    key = placed_key(client, job.id)
    if key is None:
        base = base_model_dir(session, job)
        taken = Counter(k for other, other_base, k in sharing_drivers(session, client)
                        if other.id != job.id and other_base == base and k is not None)
        slot = next(s for s in itertools.count() if process_room(client, training_key(base, s),
                                                                 taken[training_key(base, s)]) > 0)
        key = training_key(base, slot)
        client.set(keys.driver_share(job.id), key, ex=30 * 86400)
    client.rpush(keys.share_joins(key), json.dumps({"job_id": job.id}))
    ensure_shared(client, sender, key)
    return key
