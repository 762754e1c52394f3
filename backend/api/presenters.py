"""ORM rows -> public schemas where more than one row is involved (jobs need instance counts and latest metrics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import Role
from backend.db.models import Job, Team, User
from backend.schemas.auth import Quotas, TeamPublic
from backend.schemas.common import Page
from backend.schemas.jobs import JobPublic, Progress
from backend.services.job_data import job_summaries

M = TypeVar("M", bound=BaseModel)


def page_of(schema: type[M], rows: Sequence[Any], total: int | None = None) -> Page[M]:
    """ORM rows as a `Page` of `schema`; `total` (all matching rows) defaults to the rows given."""
    return Page(data=[schema.model_validate(row) for row in rows], count=len(rows) if total is None else total)


def team_public(team: Team, role: Role | None = None) -> TeamPublic:
    quotas = Quotas(
        max_concurrent_jobs=team.max_concurrent_jobs, max_generation_instances=team.max_generation_instances
    )
    return TeamPublic(id=team.id, name=team.name, quotas=quotas, role=role)


def jobs_public(session: Session, jobs: list[Job]) -> list[JobPublic]:
    ids = [job.id for job in jobs]
    summaries = job_summaries(session=session, job_ids=ids)
    creator_ids = {job.created_by_id for job in jobs if job.created_by_id is not None}
    emails = {uid: email for uid, email in session.execute(select(User.id, User.email).where(User.id.in_(creator_ids)))}
    return [
        JobPublic(
            id=job.id,
            name=job.name,
            status=job.status,
            spec=job.spec,
            target_instances=job.target_instances,
            running_instances=summaries[job.id][0],
            autoscale=job.autoscale,
            created_by=job.created_by_id,
            created_by_email=emails.get(job.created_by_id) if job.created_by_id is not None else None,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            error=job.error,
            progress=Progress(
                iteration=job.current_iteration,
                total_iterations=int(job.spec.get("training", {}).get("iterations", 0)),
            ),
            latest_metrics=summaries[job.id][1],
            ptl_profile=job.ptl_profile,
        )
        for job in jobs
    ]


def job_public(session: Session, job: Job) -> JobPublic:
    return jobs_public(session, [job])[0]
