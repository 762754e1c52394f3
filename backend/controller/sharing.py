"""Placing the instances of sharing LoRA jobs (`JobSpec.shares_generation`) on shared generation instances.

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
import json
from pathlib import Path
from typing import Protocol

import redis
from sqlalchemy.orm import Session

from backend.db import Job, Team
from backend.services.models import find_model
from contract import keys
from contract.spec import JobSpec

START_MARKER_S = 120  # a sent shared instance that has not beaten this long is sent again


class SharedSender(Protocol):
    def start_shared(self, key: str) -> str: ...


def base_model_dir(session: Session, job: Job, spec: JobSpec) -> str:
    """The base model's directory as the job's workers will resolve it (workers/runtime/context.py)."""
    model = find_model(session=session, team_id=job.team_id, name=spec.model)
    if model is not None:
        return str(Path(model.path).resolve())
    return str(Path(spec.model).expanduser().resolve())


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
    key = share_key(base_model_dir(session, job, spec), spec.share_settings, slot)
    client.rpush(keys.share_joins(key), json.dumps({"job_id": job.id, "instance_id": instance_id,
                                                    "weight": share_weight(session, job)}))
    ensure_shared(client, sender, key)
    return key


def ensure_shared(client: redis.Redis, sender: SharedSender, key: str) -> None:
    """Send the shared instance's task unless its process beats or a task is on its way. Called at placement and,
    for instances still waiting, at every pass: a process that died (kill -9) is replaced once its state expires."""
    if not client.exists(keys.share_state(key)) and \
            client.set(keys.share_starting(key), 1, nx=True, ex=START_MARKER_S):
        sender.start_shared(key)
