"""The dashboard's read models: the runs table (jobs + health in one request), one job's health, its spec as YAML."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.api.deps import IdPath, OptionalRedisDep, SessionDep, TagQuery, TextQuery, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import job_row_public
from backend.db.enums import JobStatus
from backend.db.models import Iteration, Job
from backend.schemas.dashboard import JobHealth, RunPublic, RunsPublic
from backend.services import jobs as job_service
from backend.services.driver_liveness import DriverBeats, read_driver_beats
from backend.services.health import jobs_health
from backend.services.spec_yaml import spec_yaml

router = APIRouter(tags=["dashboard"], responses=errors(*AUTHENTICATED))


def _eval_rewards(session: Session, job_ids: list[int]) -> dict[int, float]:
    """job id -> eval_reward of its newest iteration that recorded one (one query)."""
    value = Iteration.metrics["eval_reward"].as_float()
    rank = func.row_number().over(partition_by=Iteration.job_id, order_by=Iteration.iteration.desc()).label("rank")
    ranked = select(Iteration.job_id, value.label("value"), rank).where(
        Iteration.job_id.in_(job_ids), value.is_not(None)
    ).subquery()
    rows = session.execute(select(ranked.c.job_id, ranked.c.value).where(ranked.c.rank == 1))
    return {job_id: float(v) for job_id, v in rows}


def _duration(job: Job, now: datetime) -> float | None:
    if job.started_at is None:
        return None
    end = job.finished_at or now
    aware = [m if m.tzinfo else m.replace(tzinfo=UTC) for m in (job.started_at, end)]
    return (aware[1] - aware[0]).total_seconds()


@router.get("/runs")
def list_runs(
    auth: ViewerAuth,
    session: SessionDep,
    redis: OptionalRedisDep,
    status: JobStatus | None = None,
    name: Annotated[str | None, Query(max_length=200, description="substring of the job name")] = None,
    tag: TagQuery = None,
    q: TextQuery = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RunsPublic:
    """The team's jobs with health, duration and eval reward: the whole runs table in one request; filtered like
    `GET /jobs` (status, name, tag, text in the name, tags or notes)."""
    listing, total = job_service.list_jobs(
        session=session, team=auth.team, status=status, name=name, tag=tag, q=q, limit=limit, offset=offset
    )
    jobs = [row[0] for row in listing]
    now = datetime.now(UTC)
    health = jobs_health(session=session, jobs=jobs, now=now, beats=_beats(redis, jobs))
    evals = _eval_rewards(session, [job.id for job in jobs]) if jobs else {}
    rows = [
        RunPublic(
            **public.model_dump(), health=health[job.id], duration_s=_duration(job, now), eval_reward=evals.get(job.id)
        )
        for job, public in ((row[0], job_row_public(*row)) for row in listing)
    ]
    return RunsPublic(data=rows, count=total)


@router.get("/jobs/{job_id}/health")
def job_health(job_id: IdPath, auth: ViewerAuth, session: SessionDep, redis: OptionalRedisDep) -> JobHealth:
    """What the job is doing, from instance rows, iteration times and metrics, events, its error and its driver's
    heartbeat."""
    job = job_service.get_job(session=session, team=auth.team, job_id=job_id)
    return jobs_health(session=session, jobs=[job], beats=_beats(redis, [job]))[job.id]


def _beats(redis: OptionalRedisDep, jobs: list[Job]) -> DriverBeats | None:
    """The running jobs' driver heartbeats (one Redis round trip)."""
    return read_driver_beats(redis, [job.id for job in jobs if job.status == JobStatus.running])


@router.get(
    "/jobs/{job_id}/spec.yaml",
    responses={200: {"content": {"application/yaml": {}}, "description": "the JobSpec as YAML"}},
)
def job_spec_yaml(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> PlainTextResponse:
    """The job's spec as YAML (copy it into a file for `streamrl jobs submit`)."""
    job = job_service.get_job(session=session, team=auth.team, job_id=job_id)
    return PlainTextResponse(spec_yaml(job.spec), media_type="application/yaml")
