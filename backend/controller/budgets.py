"""The controller's budget pass (rules: backend/services/budgets.py), run at the start of each reconcile pass.

- a running job at WARN_AT of a budget: one `budget_warning` event per budget and limit value (the team's monthly
  budget: once per team, month and limit, on one of its running jobs);
- a running job at 100% of one: paused (`budget_exceeded` naming the budget, `job.paused_for` set); the driver
  takes a checkpoint when it sees the pause (workers/runtime/driver.py) and waits;
- a job it paused whose budgets all have room again (a limit raised, a new month): running again
  (`budget_resumed`), as soon as the team has a free job slot.
Tinker sessions count towards their team's budget but are never paused here (their calls are interactive).
"""

from __future__ import annotations

import logging

import redis
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from backend.db.enums import ACTIVE_JOB_STATUSES, JobStatus
from backend.db.models import Job, Team
from backend.services.budgets import WARN_AT, Budget, budgets_of, exhausted, job_limits
from backend.services.jobs import record_event, transition_job
from backend.services.tinker import is_tinker_job
from backend.services.usage import job_totals, month_start, team_month_totals
from contract import events, keys
from contract.spec_operations import LimitsSpec

log = logging.getLogger("streamrl.controller")
NOTED_TTL_S = 40 * 86400  # longer than a month: the team's warning is keyed by month anyway


def enforce_budgets(session: Session, client: redis.Redis) -> tuple[list[int], list[int]]:
    """Pause the running jobs over a budget, resume those it paused that have room; (paused ids, resumed ids)."""
    jobs = [job for job in session.scalars(select(Job).where(or_(
        Job.status == JobStatus.running, (Job.status == JobStatus.paused) & Job.paused_for.is_not(None))))
        if not is_tinker_job(job)]
    if not jobs:
        return [], []
    teams = {team.id: team for team in session.scalars(select(Team).where(Team.id.in_({j.team_id for j in jobs})))}
    limited = [job.id for job in jobs if job_limits(job) != LimitsSpec()]
    usage = job_totals(session, limited)
    month = team_month_totals(session, [t.id for t in teams.values() if t.max_device_hours_per_month is not None])
    paused: list[int] = []
    resumed: list[int] = []
    for job in jobs:
        team = teams[job.team_id]
        budgets = budgets_of(job, team, usage.get(job.id), month.get(team.id))
        over = exhausted(budgets)
        if job.status == JobStatus.running:
            if over is not None:
                _pause(session, job, over)
                paused.append(job.id)
            else:
                _warn(session, client, job, [b for b in budgets if b.fraction >= WARN_AT])
        elif over is None and _has_job_slot(session, team, job):
            _resume(session, job)
            resumed.append(job.id)
    return paused, resumed


def _where_to_raise(budget: Budget, job: Job) -> str:
    if budget.scope == "job":
        return f"raise it (PATCH /api/v1/jobs/{job.id} with `limits`, or `streamrl jobs limits {job.id}`)"
    return "an admin can raise it (PATCH /api/v1/teams/current/quotas, or `streamrl team quotas`)"


def _pause(session: Session, job: Job, budget: Budget) -> None:
    transition_job(session=session, job=job, to=JobStatus.paused)
    job.paused_for = budget.name
    record_event(session=session, job_id=job.id, kind=events.BUDGET_EXCEEDED,
                 message=f"paused at 100% of {budget.describe()}; the driver checkpoints and waits; "
                         f"{_where_to_raise(budget, job)} to resume", data=budget.data())
    log.info("job %s paused: %s", job.id, budget.describe())


def _resume(session: Session, job: Job) -> None:
    was = job.paused_for
    transition_job(session=session, job=job, to=JobStatus.running)
    job.paused_for = None
    record_event(session=session, job_id=job.id, kind=events.BUDGET_RESUMED,
                 message=f"{was} has room again: resumed", data={"budget": was})
    log.info("job %s resumed: %s has room", job.id, was)


def _warn(session: Session, client: redis.Redis, job: Job, near: list[Budget]) -> None:
    for budget in near:
        key = keys.noted(job.id, f"budget:{budget.name}:{budget.limit:g}") if budget.scope == "job" else \
            keys.team_noted(job.team_id, f"budget:{month_start():%Y-%m}:{budget.limit:g}")
        if client.set(key, 1, nx=True, ex=NOTED_TTL_S):
            record_event(session=session, job_id=job.id, kind=events.BUDGET_WARNING,
                         message=f"{100 * WARN_AT:.0f}% reached: {budget.describe()}; at 100% the job pauses",
                         data=budget.data())


def _has_job_slot(session: Session, team: Team, job: Job) -> bool:
    active = session.scalar(select(func.count()).select_from(Job).where(
        Job.team_id == team.id, Job.status.in_(ACTIVE_JOB_STATUSES), Job.id != job.id)) or 0
    return active < team.max_concurrent_jobs
