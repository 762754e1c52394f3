"""ORM rows -> public schemas where more than one row is involved (jobs need instance counts and latest metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import Role
from backend.db.models import Job, Team
from backend.schemas.auth import Quotas, TeamPublic
from backend.schemas.common import Page
from backend.schemas.jobs import JobPublic, Progress
from backend.services.job_data import summary_columns
from contract.scheduling import Priority
from contract.sharing import stored_spec_shares_generation, stored_spec_shares_training

M = TypeVar("M", bound=BaseModel)


def page_of(schema: type[M], rows: Sequence[Any], total: int | None = None) -> Page[M]:
    """ORM rows as a `Page` of `schema`; `total` (all matching rows) defaults to the rows given."""
    return Page(data=[schema.model_validate(row) for row in rows], count=len(rows) if total is None else total)


def team_public(team: Team, role: Role | None = None) -> TeamPublic:
    quotas = Quotas(
        max_concurrent_jobs=team.max_concurrent_jobs, max_generation_instances=team.max_generation_instances,
        max_device_hours_per_month=team.max_device_hours_per_month, share=team.share,
        max_priority=cast(Priority, team.max_priority),
    )
    return TeamPublic(id=team.id, name=team.name, quotas=quotas, role=role)


def job_row_public(
    job: Job, running: int, pending: int, latest_metrics: dict[str, Any] | None, email: str | None
) -> JobPublic:
    return JobPublic(
        id=job.id,
        name=job.name,
        status=job.status,
        spec=job.spec,
        target_instances=job.target_instances,
        running_instances=running,
        pending_instances=pending,
        shared_generation=stored_spec_shares_generation(job.spec),
        shared_training=stored_spec_shares_training(job.spec),
        autoscale=job.autoscale,
        created_by=job.created_by_id,
        created_by_email=email if job.created_by_id is not None else None,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        error=job.error,
        progress=Progress(
            iteration=job.current_iteration,
            total_iterations=int(job.spec.get("training", {}).get("iterations", 0)),
        ),
        latest_metrics=latest_metrics,
        ptl_profile=job.ptl_profile,
        tags=list(job.tags or []),
        notes=job.notes or "",
        parent_job_id=job.parent_job_id,
        parent_iteration=job.parent_iteration,
    )


def job_public(session: Session, job: Job) -> JobPublic:
    """One job with its summary (running and pending instances, latest metrics, creator email): one query."""
    running, pending, latest, email = session.execute(
        select(*summary_columns()).select_from(Job).where(Job.id == job.id)
    ).one()
    return job_row_public(job, int(running), int(pending), latest, email)
