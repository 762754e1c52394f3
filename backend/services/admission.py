"""Admission: one scheduling pass over every queued job and session, by the pure scheduler (backend/scheduler).

    result = schedule_pass(session=session, client=redis, training=..., generation=...)

Builds the `Snapshot` from the database (queued jobs are waiting items; starting, running and paused jobs hold
slots; a parked Tinker session holds none), applies the `Decisions` (queued -> starting, elastic targets lowered,
preemption flags the drivers obey at their next checkpoint), and stores every waiting item's queue entry in Redis
for the API (GET /jobs/{id} `queue`, `streamrl queue`, the cluster page). Without `client` (unit tests of the
database rules) it admits only: no preemption, no stored queue, no recent-use history.
The team caps `max_concurrent_jobs` and `max_generation_instances` stay limits the scheduler never passes.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC
from typing import Any

import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import GenerationInstance, Job, Team
from backend.scheduler import Decisions, Running, Snapshot, TeamQuota, Waiting, decide, dominant_share
from backend.scheduler.history import decayed, half_life_s
from backend.services import generation_leases
from backend.services.jobs import TrainingSlots, job_devices, record_event, transition_job
from backend.services.tinker import is_tinker_job
from contract import keys
from contract.scheduling import PRIORITY_RANK
from contract.sharing import stored_spec_shares_generation, stored_spec_shares_training
from contract.states import InstanceStatus

HOLDING = (JobStatus.starting, JobStatus.running, JobStatus.paused)
UNJUDGED = 1 << 30  # a pool no worker registered: the controller cannot judge it, so it never holds anyone up


def preempt_grace_s() -> float:
    """STREAMRL_PREEMPT_GRACE_S (default 60): how long a preempted driver may run on to reach its next checkpoint."""
    return float(os.environ.get("STREAMRL_PREEMPT_GRACE_S", "60"))


@dataclass
class PassResult:
    admitted: list[Job] = field(default_factory=list)
    decisions: Decisions = field(default_factory=Decisions)
    jobs: dict[int, Job] = field(default_factory=dict)  # every job the pass saw, by id


def schedule_pass(
    *, session: Session, client: redis.Redis | None = None, training: TrainingSlots | None = None,
    generation: tuple[int, int] | None = None, waiting: Callable[[Job, str], None] | None = None,
) -> PassResult:
    """One pass. `generation`: (free generation slots, slots in all) or None when no generation worker registered;
    `waiting(job, reason)` hears of each job held for slots or by its team's caps."""
    now = time.time()
    queued = list(session.scalars(select(Job).where(Job.status == JobStatus.queued).order_by(Job.id)))
    holding = list(session.scalars(select(Job).where(Job.status.in_(HOLDING))))
    if not queued:
        _store_queue(client, {})
        _remember(session, client, holding, training, generation, now)
        return PassResult()
    team_ids = sorted({job.team_id for job in queued} | {job.team_id for job in holding})
    leases = generation_leases.live(client, now) if client is not None else []
    team_ids = sorted(set(team_ids) | {lease.team_id for lease in leases})
    teams = {team.id: team for team in session.scalars(select(Team).where(Team.id.in_(team_ids)).with_for_update())}
    recent = _recent(client, now)
    running = [_running(job, client, now) for job in holding]
    running += _leased(leases, now)  # deployment replicas and evaluations hold generation slots too
    room = dict(training.room) if training is not None else {}
    items = [_waiting(job, training, room, generation is not None) for job in queued]
    paused = {team: sum(1 for job in holding if job.team_id == team and job.status == JobStatus.paused)
              for team in team_ids}
    leased = generation_leases.by_team(leases)  # a lease is no job: it never counts against max_concurrent_jobs
    quotas = {team_id: TeamQuota(share=team.share,
                                 max_jobs=team.max_concurrent_jobs + paused[team_id] + leased.get(team_id, 0),
                                 max_generation=team.max_generation_instances, recent=recent.get(team_id, 0.0))
              for team_id, team in teams.items()}
    held_training = sum(r.training for r in running)
    held_generation = sum(r.generation for r in running)
    free_generation = max(0, generation[0] - _pending_instances(session) - len(leases)) if generation is not None \
        else UNJUDGED
    snapshot = Snapshot(
        now, (training.free if training is not None else UNJUDGED) + held_training,
        free_generation + held_generation, quotas, running, items, grace_s=preempt_grace_s(),
        finishing_s=2 * preempt_grace_s(),
        preempt_scan=64 if client is not None else 0)
    decisions = decide(snapshot)
    result = PassResult(decisions=decisions, jobs={job.id: job for job in [*queued, *holding]})
    for job_id in decisions.admit:
        job = result.jobs[job_id]
        transition_job(session=session, job=job, to=JobStatus.starting)
        _note_admitted(session, client, job, now)
        result.admitted.append(job)
    if client is not None:
        _apply_preemptions(session, client, result, now)
    for job_id, info in decisions.queue.items():
        if waiting is not None:
            waiting(result.jobs[job_id], info.reason)
    _store_queue(client, {job_id: asdict(info) for job_id, info in decisions.queue.items()})
    _remember(session, client, holding + result.admitted, training, generation, now)
    session.flush()
    return result


def admit_queued_jobs(
    *, session: Session, training: TrainingSlots | None = None, waiting: Callable[[Job, str], None] | None = None
) -> list[Job]:
    """queued -> starting for what the scheduler admits now, without Redis (no preemption, no stored queue)."""
    return schedule_pass(session=session, training=training, waiting=waiting).admitted


def _priority(job: Job) -> int:
    return PRIORITY_RANK.get(str(job.spec.get("priority", "normal")), PRIORITY_RANK["normal"])


def waiting_demand(job: Job) -> tuple[int, int]:
    """(training slots, generation instances) a queued job asks for: what the queue metrics add up per pool."""
    return job_devices(job), job.target_instances if _own_generation(job) else 0


def _own_generation(job: Job) -> bool:
    """The job runs generation instances of its own (not colocated, not on shared instances)."""
    return job.spec.get("mode") != "colocated" and not is_tinker_job(job)


def _iteration_s(job: Job, now: float) -> float | None:
    """Seconds per iteration so far (coarse: wall time since the first start over iterations recorded)."""
    if job.started_at is None or not job.current_iteration:
        return None
    started = (job.started_at if job.started_at.tzinfo else job.started_at.replace(tzinfo=UTC)).timestamp()
    return max(0.0, now - started) / job.current_iteration


def _remaining_s(job: Job, now: float) -> float:
    per = _iteration_s(job, now)
    iterations = int((job.spec.get("training") or {}).get("iterations", 0) or 0)
    if per is None or is_tinker_job(job):
        return math.inf
    return max(0, iterations - job.current_iteration) * per


def _waiting(job: Job, training: TrainingSlots | None, room: dict[str, int], judge_generation: bool) -> Waiting:
    slots = training.needed(job, room) if training is not None else job_devices(job)
    target = job.target_instances if _own_generation(job) else 0
    floor = 0 if not judge_generation or target == 0 or stored_spec_shares_generation(job.spec) else 1
    submitted = (job.created_at if job.created_at.tzinfo else job.created_at.replace(tzinfo=UTC)).timestamp()
    return Waiting(job.id, job.team_id, submitted, _priority(job), slots, target, floor,
                   est_s=_remaining_s(job, time.time()))


def _running(job: Job, client: redis.Redis | None, now: float) -> Running:
    paused = job.status == JobStatus.paused
    slots = 0 if stored_spec_shares_training(job.spec) else job_devices(job)  # a shared process: counted apart
    generation = 0 if paused or not _own_generation(job) else job.target_instances
    floor = int((job.spec.get("autoscale") or {}).get("min_instances", 1) or 1) if generation else 0
    admitted = _admitted(client, job)
    interval = int((job.spec.get("checkpoint") or {}).get("interval", 1) or 1)
    first_checkpoint_done = admitted is None or job.current_iteration - int(admitted["iteration"]) >= interval
    preemptible = bool(job.spec.get("preemptible", True)) and not paused and not is_tinker_job(job)
    started = float(admitted["at"]) if admitted else now
    return Running(job.id, job.team_id, started, _priority(job), slots, generation, min(floor, generation),
                   preemptible=preemptible, est_end=now + _remaining_s(job, now),
                   protected_until=0.0 if first_checkpoint_done and job.status == JobStatus.running else math.inf,
                   preempting=client is not None and bool(client.exists(keys.job_preempt(job.id))))


def _leased(leases: list[generation_leases.Lease], now: float) -> list[Running]:
    """Each live lease as a running item of its team holding one generation slot, never preempted or shrunk (ids
    below zero: they name no job)."""
    return [Running(-(index + 1), lease.team_id, now, training=0, generation=1, generation_min=1, preemptible=False,
                    est_end=lease.until, protected_until=math.inf) for index, lease in enumerate(leases)]


def _admitted(client: redis.Redis | None, job: Job) -> dict[str, Any] | None:
    raw = client.get(keys.job_admitted(job.id)) if client is not None else None
    return json.loads(raw) if raw else None


def _pending_instances(session: Session) -> int:
    """Instances asked for and not picked up yet: they take the next free generation slots."""
    return int(session.scalar(select(func.count(GenerationInstance.id)).where(
        GenerationInstance.status == InstanceStatus.starting, GenerationInstance.heartbeat_at.is_(None))) or 0)


def _note_admitted(session: Session, client: redis.Redis | None, job: Job, now: float) -> None:
    resumed = job.current_iteration > 0
    if client is not None:
        client.set(keys.job_admitted(job.id), json.dumps({"at": now, "iteration": job.current_iteration}), ex=7 * 86400)
    message = (f"resumed by the scheduler: continues from its newest checkpoint (iteration {job.current_iteration})"
               if resumed else f"started by the scheduler ({job.spec.get('priority', 'normal')} priority)")
    record_event(session=session, job_id=job.id, kind="scheduler", message=message,
                 data={"scheduler": "resumed" if resumed else "started", "iteration": job.current_iteration})


def _apply_preemptions(session: Session, client: redis.Redis, result: PassResult, now: float) -> None:
    grace = preempt_grace_s()
    for job_id, reason in result.decisions.preempt.items():
        flag = json.dumps({"reason": reason, "deadline": now + grace})
        if client.set(keys.job_preempt(job_id), flag, nx=True, ex=86400):
            record_event(session=session, job_id=job_id, kind="scheduler",
                         message=f"{reason}; it hands back at its next checkpoint (within {grace:.0f}s)",
                         data={"scheduler": "preempting", "grace_s": grace})
    for job_id, target in result.decisions.shrink.items():
        job = result.jobs[job_id]
        if target < job.target_instances:
            record_event(session=session, job_id=job_id, kind="scale",
                         message=f"target_instances {job.target_instances} -> {target}: the scheduler lowered this "
                                 "over-share job's elastic generation for a waiting job that outranks it",
                         data={"target_instances": {"from": job.target_instances, "to": target}, "scheduler": True})
            job.target_instances = target


def _store_queue(client: redis.Redis | None, entries: dict[int, dict[str, Any]]) -> None:
    if client is not None:
        items = {str(k): v for k, v in entries.items()}
        client.set(keys.scheduler_queue(), json.dumps({"at": time.time(), "items": items}), ex=600)


def stored_queue(client: redis.Redis | None) -> tuple[float | None, dict[int, dict[str, Any]]]:
    """(when, entries by job id) of the last pass's queue; (None, {}) when Redis is out or no pass ran lately."""
    try:
        raw = client.get(keys.scheduler_queue()) if client is not None else None
    except redis.RedisError:  # the pages that show it (GET /jobs) still answer without Redis
        return None, {}
    if not raw:
        return None, {}
    stored = json.loads(raw)
    return float(stored["at"]), {int(k): v for k, v in stored["items"].items()}


def _recent(client: redis.Redis | None, now: float) -> dict[int, float]:
    if client is None:
        return {}
    half_life = half_life_s()
    out: dict[int, float] = {}
    for team, raw in client.hgetall(keys.scheduler_recent()).items():
        entry = json.loads(raw)
        out[int(team)] = decayed(float(entry["share"]), float(entry.get("holding", 0.0)), now - float(entry["at"]),
                                 half_life)
    return out


def _remember(session: Session, client: redis.Redis | None, holding: Sequence[Job], training: TrainingSlots | None,
              generation: tuple[int, int] | None, now: float) -> None:
    """Fold the weighted dominant share each team held since the last pass into its decayed recent standing, and
    store what it holds now (admissions of this pass included) for the next interval."""
    if client is None:
        return
    teams = {team.id: team for team in session.scalars(select(Team).where(Team.id.in_({j.team_id for j in holding})))}
    held: dict[int, list[int]] = {team: [0, 0] for team in teams}
    for job in holding:
        held[job.team_id][0] += job_devices(job)
        held[job.team_id][1] += job.target_instances if _own_generation(job) else 0
    stored = {int(t): json.loads(raw) for t, raw in client.hgetall(keys.scheduler_recent()).items()}
    snapshot = Snapshot(now, training.slots if training is not None else 0, generation[1] if generation else 0,
                        {}, [], [])
    half_life = half_life_s()
    update: dict[Any, str] = {}  # team id -> JSON (redis-py types its keys as a union)
    for team in set(stored) | set(held):
        t, g = held.get(team, [0, 0])
        weight = teams[team].share if team in teams else 1.0
        current = dominant_share(t, g, snapshot, weight)
        before = stored.get(team, {"share": 0.0, "at": now})
        # the interval since the last pass counts at what the team held from its start (what that pass admitted
        # included): a job that starts and ends between two passes still counts, where the share held at the
        # interval's end (none by then) would leave it invisible to fair share
        share = decayed(float(before["share"]), float(before.get("holding", 0.0)), now - float(before["at"]),
                        half_life)
        if share > 1e-6 or current > 0:
            update[str(team)] = json.dumps({"share": share, "at": now, "holding": current})
    client.delete(keys.scheduler_recent())
    if update:
        client.hset(keys.scheduler_recent(), mapping=update)
