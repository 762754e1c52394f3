"""Budgets: a job's `limits` (max_device_seconds, max_tokens) and its team's `max_device_hours_per_month`.

At WARN_AT of a budget the controller records a `budget_warning` event (the `budget` alert), at 100% it pauses the
job (`budget_exceeded`, `job.paused_for` = the budget's name) and resumes it once the budget has room again: the
limit raised (PATCH /jobs/{id} `limits`, PATCH /teams/current/quotas) or a new month. A submission while the team's
monthly budget is used up is refused (403 naming it). The controller's side is backend/controller/budgets.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy.orm import Session

from backend.db.models import Job, JobEvent, Team
from backend.services.errors import Forbidden
from backend.services.usage import UsageTotals, job_totals, team_month_totals
from contract import events
from contract.spec_operations import LimitsSpec

WARN_AT = 0.8
TEAM_BUDGET = "max_device_hours_per_month"


@dataclass(frozen=True)
class Budget:
    name: str  # limits.max_device_seconds | limits.max_tokens | max_device_hours_per_month
    scope: str  # job | team
    limit: float
    used: float
    unit: str  # device-seconds | tokens | device-hours

    @property
    def fraction(self) -> float:
        return self.used / self.limit if self.limit > 0 else float("inf")

    def describe(self) -> str:
        owner = "the job's" if self.scope == "job" else "the team's"
        return (f"{owner} {self.name} ({self.limit:g} {self.unit}): {self.used:.6g} used "
                f"({100 * self.fraction:.0f}%)")

    def data(self) -> dict[str, object]:
        return {"budget": self.name, "scope": self.scope, "limit": self.limit, "used": self.used, "unit": self.unit}


def job_limits(job: Job) -> LimitsSpec:
    """The job's `limits`; a stored value that does not validate (written around the API) counts as none here (the
    controller fails such a job for its invalid spec), so one bad row never stops the budget pass."""
    try:
        return LimitsSpec.model_validate((job.spec or {}).get("limits") or {})
    except ValidationError:
        return LimitsSpec()


def team_budget(team: Team, month: UsageTotals | None) -> Budget | None:
    if team.max_device_hours_per_month is None:
        return None
    used = (month.device_seconds if month else 0.0) / 3600.0
    return Budget(TEAM_BUDGET, "team", float(team.max_device_hours_per_month), used, "device-hours")


def budgets_of(job: Job, team: Team, usage: UsageTotals | None, month: UsageTotals | None) -> list[Budget]:
    """Every budget that applies to `job`, with what it used."""
    limits, usage = job_limits(job), usage or UsageTotals()
    out: list[Budget] = []
    if limits.max_device_seconds is not None:
        out.append(Budget("limits.max_device_seconds", "job", limits.max_device_seconds, usage.device_seconds,
                          "device-seconds"))
    if limits.max_tokens is not None:
        out.append(Budget("limits.max_tokens", "job", float(limits.max_tokens), float(usage.tokens), "tokens"))
    team_wide = team_budget(team, month)
    if team_wide is not None:
        out.append(team_wide)
    return out


def exhausted(budgets: list[Budget]) -> Budget | None:
    return next((b for b in budgets if b.used >= b.limit), None)


def check_team_budget(session: Session, team: Team) -> None:
    """403 naming `max_device_hours_per_month` when the team's budget for this month is used up."""
    budget = team_budget(team, team_month_totals(session, [team.id]).get(team.id))
    if budget is not None and budget.used >= budget.limit:
        raise Forbidden(f"the team's monthly budget is used up: {budget.describe()}; an admin can raise "
                        f"{TEAM_BUDGET} (PATCH /teams/current/quotas), or wait for the next month",
                        budget=TEAM_BUDGET, limit=budget.limit, used=budget.used)


def check_resumable(session: Session, team: Team, job: Job) -> None:
    """403 naming the budget when resuming `job` would exceed one (raise it first)."""
    found = exhausted(budgets_of(job, team, job_totals(session, [job.id]).get(job.id),
                                 team_month_totals(session, [team.id]).get(team.id)))
    if found is not None:
        where = "PATCH /jobs/{id} with `limits`" if found.scope == "job" else "PATCH /teams/current/quotas"
        raise Forbidden(f"job {job.id} is over a budget: {found.describe()}; raise it ({where}) to resume",
                        budget=found.name, limit=found.limit, used=found.used)


def set_job_limits(*, session: Session, job: Job, limits: LimitsSpec) -> Job:
    """Replace the job's `limits` (an event says what changed); a job paused by a job limit that now has room is
    resumed by the controller's next pass."""
    before = job_limits(job)
    if before == limits:
        return job
    job.spec = {**(job.spec or {}), "limits": limits.model_dump(mode="json")}
    changed = {name: {"from": getattr(before, name), "to": getattr(limits, name)}
               for name in LimitsSpec.model_fields if getattr(before, name) != getattr(limits, name)}
    summary = ", ".join(f"limits.{name} {c['from']} -> {c['to']}" for name, c in changed.items())
    event = JobEvent(job_id=job.id, kind=events.LIMITS, message=summary, data=changed)
    session.add(event)
    session.flush()
    return job
