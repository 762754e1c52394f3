"""Job health from database facts only: instance rows, iteration times and metrics, the job's events and error.

A job is never reported healthy just because it is `running`: an instance that was asked for but never heart-beat is
pending (not running), a running job with no new iteration for `stall_after_s` is stalled, instances declared dead
repeatedly within `CRASH_WINDOW_S` mean a crash loop, and reward errors in the newest iteration are surfaced with the
newest error text. Every read is batched over the listed jobs (a fixed number of queries, not one per job).

The driver's liveness comes from Redis when the caller passes it (backend/services/driver_liveness.py) and from the
driver's lifecycle events (data["driver"]: sent, lost, restarted, resumed): a running job whose driver stopped
beating is "driver lost", one whose new driver is starting is "restarting", and one whose driver resumed from
checkpoint N is "resuming from checkpoint N" until an iteration newer than that event is recorded.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Iteration, Job, JobEvent
from backend.schemas.dashboard import InstanceHealth, JobHealth
from backend.services.driver_liveness import LOST_AFTER_S, DriverBeats
from backend.services.job_data import SILENT_AFTER_S
from backend.services.signals import jobs_signals, with_signals

CRASH_WINDOW_S = 600.0  # instances declared dead within this window count towards a crash loop
CRASH_LOOP_DEAD = 3  # this many dead instances within the window is a crash loop
MIN_STALL_S = 120.0  # stalled: no iteration for max(MIN_STALL_S, STALL_FACTOR x median iteration interval)
STALL_FACTOR = 5.0
RECENT_ITERATIONS = 10  # iterations whose spacing sets the stall limit
ERROR_EVENT_KINDS = ("reward_error", "error", "worker", "capacity")  # the newest of each kind is read


@dataclass
class _Facts:
    instances: list[GenerationInstance] = field(default_factory=list)
    times: list[datetime] = field(default_factory=list)  # newest RECENT_ITERATIONS iteration times, newest first
    reward_errors_latest: int = 0
    reward_errors_total: int = 0
    events: dict[str, str] = field(default_factory=dict)  # kind -> newest message
    driver_event: JobEvent | None = None  # the newest driver lifecycle event (data["driver"] set)
    resumed_at: datetime | None = None  # the newest resume after a pause


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _gather(session: Session, job_ids: list[int], now: datetime) -> dict[int, _Facts]:
    facts = {job_id: _Facts() for job_id in job_ids}
    recent_dead = GenerationInstance.stopped_at >= now - timedelta(seconds=CRASH_WINDOW_S)
    instances = session.scalars(
        select(GenerationInstance).where(
            GenerationInstance.job_id.in_(job_ids),
            GenerationInstance.status.in_([InstanceStatus.starting, InstanceStatus.running])
            | ((GenerationInstance.status == InstanceStatus.dead) & recent_dead),
        )
    )
    for inst in instances:
        facts[inst.job_id].instances.append(inst)

    rank = func.row_number().over(partition_by=Iteration.job_id, order_by=Iteration.iteration.desc()).label("rank")
    ranked = select(
        Iteration.job_id, Iteration.created_at, Iteration.metrics["reward_errors"].as_float().label("errors"), rank
    ).where(Iteration.job_id.in_(job_ids)).subquery()
    for job_id, created_at, errors, position in session.execute(
        select(ranked).where(ranked.c.rank <= RECENT_ITERATIONS).order_by(ranked.c.job_id, ranked.c.rank)
    ):
        facts[job_id].times.append(_aware(created_at))
        if position == 1:
            facts[job_id].reward_errors_latest = _count(errors)

    totals = select(Iteration.job_id, func.sum(Iteration.metrics["reward_errors"].as_float()))
    for job_id, total in session.execute(totals.where(Iteration.job_id.in_(job_ids)).group_by(Iteration.job_id)):
        facts[job_id].reward_errors_total = _count(total)

    newest = (
        select(func.max(JobEvent.id))
        .where(JobEvent.job_id.in_(job_ids), JobEvent.kind.in_(ERROR_EVENT_KINDS))
        .group_by(JobEvent.job_id, JobEvent.kind)
    )
    for event in session.scalars(select(JobEvent).where(JobEvent.id.in_(newest))):
        facts[event.job_id].events[event.kind] = event.message

    lifecycle = (
        select(func.max(JobEvent.id))
        .where(JobEvent.job_id.in_(job_ids), JobEvent.data["driver"].as_string().is_not(None))
        .group_by(JobEvent.job_id)
    )
    for event in session.scalars(select(JobEvent).where(JobEvent.id.in_(lifecycle))):
        facts[event.job_id].driver_event = event

    resumed = ((JobEvent.kind == "status") & (JobEvent.data["from"].as_string() == "paused")
               & (JobEvent.data["to"].as_string() == "running"))
    resumes = select(JobEvent.job_id, func.max(JobEvent.created_at)).where(JobEvent.job_id.in_(job_ids), resumed)
    for job_id, moment in session.execute(resumes.group_by(JobEvent.job_id)):
        facts[job_id].resumed_at = _aware(moment)
    return facts


def _instances(job: Job, facts: _Facts, now: datetime) -> InstanceHealth:
    running = pending = silent = dead = 0
    oldest_pending: float | None = None
    for inst in facts.instances:
        if inst.status == InstanceStatus.dead:
            dead += 1
        elif inst.heartbeat_at is None:
            pending += 1
            waited = (now - _aware(inst.started_at)).total_seconds()
            oldest_pending = max(oldest_pending or 0.0, waited)
        elif (now - _aware(inst.heartbeat_at)).total_seconds() > SILENT_AFTER_S:
            silent += 1
        else:
            running += 1
    colocated = job.spec.get("mode") == "colocated"  # generation runs inside the trainer: no instances to wait for
    return InstanceHealth(
        target=0 if colocated else job.target_instances, running=running, pending=pending, silent=silent,
        dead_recent=dead, oldest_pending_s=oldest_pending,
    )


def stall_limit(times: list[datetime]) -> float:
    """Seconds without a new iteration after which a running job is stalled (times: newest first)."""
    gaps = [(a - b).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    return max(MIN_STALL_S, STALL_FACTOR * statistics.median(gaps)) if gaps else MIN_STALL_S


def _driver(job: Job, facts: _Facts, beats: DriverBeats | None, now: datetime) -> tuple[Any, str, str | None] | None:
    """The driver's state when it is not simply training: lost, restarting, or resuming until progress is real."""
    if beats is not None and not beats.reachable:
        return "driver_lost", f"driver unreachable: Redis is down, no sample can flow ({beats.error})", beats.error
    event = facts.driver_event
    phase = str((event.data or {}).get("driver")) if event is not None else None
    data = event.data or {} if event is not None else {}
    since_event = (now - _aware(event.created_at)).total_seconds() if event is not None else 0.0
    progressed = event is not None and bool(facts.times) and facts.times[0] > _aware(event.created_at)
    age = beats.ages.get(job.id) if beats is not None else None
    if phase == "lost":
        if data.get("handed_back"):
            return "restarting_driver", "restarting: the driver handed the job back (its worker shut down)", None
        wait_s = max(0.0, float(data.get("delay_s", 0.0)) - since_event)
        return "driver_lost", f"driver lost: no heartbeat; restart from the newest checkpoint in {wait_s:.0f} s", None
    if age is not None and age > LOST_AFTER_S:
        return "driver_lost", f"driver lost: no heartbeat for {age:.0f} s (restarted once its heartbeat expires)", None
    if beats is not None and age is None and job.id in beats.seen and not (phase in ("restarted", "resumed")
                                                                          and not progressed):
        # the key expired before the controller's pass recorded the loss: still lost, never "generating"
        return "driver_lost", "driver lost: its heartbeat expired; the controller restarts it", None
    if phase == "restarted" and not progressed:
        epoch = data.get("epoch")
        return "restarting_driver", f"restarting: driver epoch {epoch} is loading the newest checkpoint", None
    if phase == "resumed" and not progressed:
        return "resuming", f"resuming from checkpoint {data.get('iteration')}: no iteration since", None
    return None


def _assess(job: Job, facts: _Facts, now: datetime, beats: DriverBeats | None = None) -> JobHealth:
    instances = _instances(job, facts, now)
    started = _aware(job.started_at) if job.started_at else None
    # the stall clock restarts on resume: a job is not stalled for the time it was paused
    last_progress = max((m for m in (facts.times[0] if facts.times else None, started, facts.resumed_at) if m),
                        default=None)
    since = (now - last_progress).total_seconds() if last_progress else None
    limit = stall_limit(facts.times)
    reward_error = facts.events.get("reward_error")
    driver = _driver(job, facts, beats, now) if job.status == JobStatus.running else None
    state, summary, error = driver or _classify(job, instances, facts, since, limit)
    return JobHealth(
        state=state,
        healthy=state in ("queued", "paused", "generating", "succeeded", "cancelled"),
        summary=summary,
        latest_error=error if error is not None else (reward_error if facts.reward_errors_latest else None),
        instances=instances,
        last_progress_at=last_progress,
        seconds_since_progress=since,
        stall_after_s=limit,
        reward_errors_latest=facts.reward_errors_latest,
        reward_errors_total=facts.reward_errors_total,
    )


def _classify(
    job: Job, inst: InstanceHealth, facts: _Facts, since: float | None, limit: float
) -> tuple[Any, str, str | None]:
    """(state, one-line summary, error text) in order of severity; the summary never repeats the state's name
    (the dashboard and the CLI print them side by side)."""
    status = JobStatus(job.status)
    if status in (JobStatus.succeeded, JobStatus.cancelled):
        return status.value, f"the job {status.value}", None
    if status == JobStatus.failed:
        return "failed", job.error or "no error recorded", job.error
    if status == JobStatus.queued:
        capacity = facts.events.get("capacity", "")
        if capacity.startswith("waiting for"):  # the scheduler's reason: slots of a pool, or the team's quota
            return "queued", capacity, None
        return "queued", "waiting for a free job slot", None
    if status == JobStatus.paused:
        return "paused", "paused by a user; resume to continue", None
    if status == JobStatus.parked:  # a Tinker session (docs/tinker.md#parking)
        return "paused", "parked: no call for a while, no training slot held; its next call restores it", None
    if inst.dead_recent >= CRASH_LOOP_DEAD:
        error = facts.events.get("error") or facts.events.get("worker")
        minutes = CRASH_WINDOW_S / 60
        return "crash_looping", f"{inst.dead_recent} instances died in the last {minutes:.0f} min", error
    if facts.reward_errors_latest:
        error = facts.events.get("reward_error") or facts.events.get("error")
        return "reward_errors", f"{facts.reward_errors_latest} reward errors in the latest iteration", error
    if status == JobStatus.running and since is not None and since > limit:
        return "stalled", f"no iteration for {since:.0f} s (limit {limit:.0f} s)", facts.events.get("error")
    if inst.pending or inst.silent or inst.running < inst.target:
        parts = [f"{inst.running} of {inst.target} instances running"]
        parts += [f"{inst.pending} pending"] if inst.pending else []
        parts += [f"{inst.silent} silent"] if inst.silent else []
        return "waiting_for_instances", ", ".join(parts), None
    return "generating", f"generating on {inst.running} instance(s)", None


def jobs_health(
    *, session: Session, jobs: list[Job], now: datetime | None = None, beats: DriverBeats | None = None
) -> dict[int, JobHealth]:
    """job id -> health with its training signals, in ten queries whatever the number of jobs; `beats`: the running
    jobs' driver heartbeats (`read_driver_beats`), None to judge from the database alone."""
    if not jobs:
        return {}
    now = now or datetime.now(UTC)
    facts = _gather(session, [job.id for job in jobs], now)
    signals = jobs_signals(session=session, jobs=jobs)
    return {job.id: with_signals(_assess(job, facts[job.id], now, beats), signals[job.id]) for job in jobs}
