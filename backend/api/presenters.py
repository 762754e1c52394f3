"""ORM rows -> public schemas where more than one row is involved (jobs need instance counts and latest metrics)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import Role
from backend.db.models import Job, Team
from backend.schemas.auth import Quotas, TeamPublic
from backend.schemas.common import Page
from backend.schemas.jobs import JobPublic, Progress
from backend.services.job_data import summary_columns
from backend.services.strict_json import finite_or_null

M = TypeVar("M", bound=BaseModel)


def page_of(schema: type[M], rows: Sequence[Any], total: int | None = None) -> Page[M]:
    """ORM rows as a `Page` of `schema`; `total` (all matching rows) defaults to the rows given."""
    return Page(data=[schema.model_validate(row) for row in rows], count=len(rows) if total is None else total)


def _strict_json(text: str) -> str:
    """Stored JSON text as strict JSON (rows written before `record_iteration` nulled non-finite numbers: SQLite)."""
    if "NaN" not in text and "Infinity" not in text:
        return text
    return json.dumps(finite_or_null(json.loads(text)))


def _utc_text(moment: datetime) -> str:
    """The JSON form pydantic gives a `UtcDatetime` (naive values are UTC: SQLite)."""
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    text = moment.isoformat()
    return (text[:-6] if text.endswith("+00:00") else text) + "Z"


def iterations_page_json(rows: Sequence[tuple[int, str, datetime]]) -> bytes:
    """`Page[IterationPublic]` as JSON bytes, spliced from the stored metrics text (equal to what the schema would
    serialize; tests/api/test_iterations_json.py checks it). Dashboards poll this page: decoding and re-encoding
    hundreds of metric rows per request was most of its cost."""
    items = ",".join(
        f'{{"iteration":{int(it)},"metrics":{_strict_json(text)},"created_at":"{_utc_text(created)}"}}'
        for it, text, created in rows
    )
    return f'{{"data":[{items}],"count":{len(rows)}}}'.encode()


def team_public(team: Team, role: Role | None = None) -> TeamPublic:
    quotas = Quotas(
        max_concurrent_jobs=team.max_concurrent_jobs, max_generation_instances=team.max_generation_instances
    )
    return TeamPublic(id=team.id, name=team.name, quotas=quotas, role=role)


def job_row_public(job: Job, running: int, latest_metrics: dict[str, Any] | None, email: str | None) -> JobPublic:
    return JobPublic(
        id=job.id,
        name=job.name,
        status=job.status,
        spec=job.spec,
        target_instances=job.target_instances,
        running_instances=running,
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
    )


def job_public(session: Session, job: Job) -> JobPublic:
    """One job with its summary (running instances, latest metrics, creator email): one query."""
    running, latest, email = session.execute(select(*summary_columns()).select_from(Job).where(Job.id == job.id)).one()
    return job_row_public(job, int(running), latest, email)
