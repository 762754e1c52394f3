"""A job's ETA and cost (GET /jobs/{id}/eta; docs/api.md#eta-and-cost), for the job page and `streamrl jobs eta`.

- Seconds per iteration: the median `iteration_seconds` of the newest RECENT recorded iterations (the driver's own
  timing, so time spent queued, parked or paused is not counted); without that metric, wall time since the start over
  the iterations done (the scheduler's estimate, backend/services/admission.py). No iteration yet: no ETA.
- ETA: remaining iterations (training.iterations - iterations done) x seconds per iteration, for a job that is
  running or starting; a finished job has 0 left; a queued, paused or parked job has no ETA (it is not progressing),
  a Tinker session neither (its client decides how many steps it takes). `note` says why when there is none.
- Cost: the job's usage records (backend/services/usage.py, what GET /usage?job_id= sums): device-seconds per pool
  and tokens; the projection adds the mean device-seconds of a recorded iteration per remaining iteration. Beside it
  the budgets it counts against, in their own units: the job's limits.max_device_seconds and the team's
  max_device_hours_per_month (used this month, UTC).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from backend.db.enums import TERMINAL_JOB_STATUSES, JobStatus
from backend.db.models import Iteration, Job, Team, UsageRecord
from backend.services.budgets import job_limits
from backend.services.tinker import is_tinker_job
from backend.services.usage import UsageTotals, job_totals, month_start, team_month_totals

RECENT = 10  # iterations the per-iteration time is the median of
Basis = Literal["recent_iterations", "wall_time"]
PROGRESSING = (JobStatus.running, JobStatus.starting)


@dataclass(frozen=True)
class Estimate:
    iterations_done: int
    iterations_total: int | None
    remaining_iterations: int | None
    seconds_per_iteration: float | None
    basis: Basis | None
    eta_s: float | None
    finishes_at: datetime | None
    note: str | None
    usage: UsageTotals
    device_seconds_per_iteration: float | None
    projected_device_seconds: float | None
    max_device_seconds: float | None  # the job's limits.max_device_seconds
    team_max_device_hours_per_month: float | None
    team_used_device_hours_this_month: float
    month_start: datetime


def _as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _seconds_per_iteration(session: Session, job: Job, now: datetime) -> tuple[float | None, Basis | None]:
    rows = session.scalars(select(Iteration.metrics).where(Iteration.job_id == job.id)
                           .order_by(Iteration.iteration.desc()).limit(RECENT)).all()
    times = [float(m["iteration_seconds"]) for m in rows
             if isinstance(m.get("iteration_seconds"), int | float) and not isinstance(m.get("iteration_seconds"), bool)
             and float(m["iteration_seconds"]) >= 0]
    if times:
        return statistics.median(times), "recent_iterations"
    if rows and job.started_at is not None and job.current_iteration:
        return max(0.0, (now - _as_utc(job.started_at)).total_seconds()) / job.current_iteration, "wall_time"
    return None, None


def _note(job: Job, total: int | None, per: float | None) -> str | None:
    if job.status in TERMINAL_JOB_STATUSES:
        return None
    if total is None:
        return "a Tinker session has no fixed number of steps: its client decides when it ends"
    if job.status not in PROGRESSING:
        return f"the job is {job.status.value}: no ETA until it runs again"
    if per is None:
        return "no ETA before the first iteration is recorded"
    return None


def estimate(session: Session, team: Team, job: Job, now: datetime | None = None) -> Estimate:
    now = now or datetime.now(UTC)
    tinker = is_tinker_job(job)
    total = None if tinker else int((job.spec.get("training") or {}).get("iterations", 0) or 0)
    done = job.current_iteration or 0
    finished = job.status in TERMINAL_JOB_STATUSES
    remaining = None if total is None else (0 if finished else max(0, total - done))
    per, basis = _seconds_per_iteration(session, job, now)
    note = _note(job, total, per)
    eta = None
    if remaining is not None and (finished or (note is None and per is not None)):
        eta = remaining * (per or 0.0)
    usage = job_totals(session, [job.id]).get(job.id, UsageTotals())
    counted = int(session.scalar(select(func.count(distinct(UsageRecord.iteration)))
                                 .where(UsageRecord.job_id == job.id, UsageRecord.iteration.is_not(None))) or 0)
    per_device = usage.device_seconds / counted if counted else None
    projected = None
    if remaining is not None and (per_device is not None or remaining == 0):
        projected = usage.device_seconds + remaining * (per_device or 0.0)
    month = team_month_totals(session, [team.id], now).get(team.id, UsageTotals())
    limit = job_limits(job).max_device_seconds
    return Estimate(
        iterations_done=done, iterations_total=total, remaining_iterations=remaining, seconds_per_iteration=per,
        basis=basis, eta_s=eta, finishes_at=None if eta is None or finished else now + timedelta(seconds=eta),
        note=note, usage=usage, device_seconds_per_iteration=per_device, projected_device_seconds=projected,
        max_device_seconds=float(limit) if limit is not None else None,
        team_max_device_hours_per_month=team.max_device_hours_per_month,
        team_used_device_hours_this_month=month.device_seconds / 3600.0, month_start=month_start(now))


def figures(totals: UsageTotals) -> dict[str, Any]:
    return {"generation_device_seconds": totals.generation_device_seconds,
            "training_device_seconds": totals.training_device_seconds, "device_seconds": totals.device_seconds,
            "tokens_generated": totals.tokens_generated, "tokens_trained": totals.tokens_trained}
