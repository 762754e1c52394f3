"""How many generation instances a job should have: its manual target, or the autoscaler's decision.

A manual target (API/UI `scale`) turns autoscaling off for the job, so it always overrides. Every autoscaler change
is a JobEvent of kind `autoscale` with the reason and the numbers behind it.
"""

from __future__ import annotations

import time
from datetime import UTC
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db import GenerationInstance, Iteration, Job, JobEvent, Team
from backend.db.enums import ACTIVE_JOB_STATUSES
from backend.planner.autoscaler import IterationRecord, ScalingBounds, decide
from backend.services.jobs import record_event
from contract.spec import JobSpec


def desired_instances(session: Session, job: Job, spec: JobSpec, live: list[GenerationInstance]) -> int:
    if not job.autoscale:
        return job.target_instances
    history = [IterationRecord(float(m.get("gen_seconds", 0.0)), float(m.get("train_seconds", 0.0)),
                               int(m.get("instances", 0)))
               for m in _recent_metrics(session, job.id, spec.autoscale.hysteresis)]
    last_change = session.scalar(select(func.max(JobEvent.created_at)).where(
        JobEvent.job_id == job.id, JobEvent.kind == "autoscale"))
    last_change_at = (last_change if last_change.tzinfo else last_change.replace(tzinfo=UTC)).timestamp() \
        if last_change else None
    bounds = ScalingBounds(spec.autoscale.min_instances, spec.autoscale.max_instances, _quota_left(session, job))
    decision = decide(history, current=job.target_instances, bounds=bounds, now=time.time(),
                      last_change_at=last_change_at, cooldown_s=spec.autoscale.cooldown_s,
                      hysteresis=spec.autoscale.hysteresis, threshold_s=spec.autoscale.threshold_s)
    if decision.target != job.target_instances:
        record_event(session=session, job_id=job.id, kind="autoscale",
                     message=f"autoscaler: {job.target_instances} -> {decision.target} instances: {decision.reason}",
                     data={"from": job.target_instances, "to": decision.target, "reason": decision.reason,
                           **decision.numbers})
        job.target_instances = decision.target
    return job.target_instances


def _recent_metrics(session: Session, job_id: int, count: int) -> list[dict[str, Any]]:
    rows = session.scalars(select(Iteration.metrics).where(Iteration.job_id == job_id)
                           .order_by(Iteration.iteration.desc()).limit(count)).all()
    return [dict(m) for m in reversed(rows)]


def _quota_left(session: Session, job: Job) -> int | None:
    """Instances the team's quota allows this job: the team's limit minus other active jobs' targets."""
    team = session.get(Team, job.team_id)
    if team is None:
        return None
    others = session.scalar(select(func.coalesce(func.sum(Job.target_instances), 0)).where(
        Job.team_id == job.team_id, Job.id != job.id, Job.status.in_(ACTIVE_JOB_STATUSES))) or 0
    return max(0, team.max_generation_instances - int(others))
