"""Jobs of the current team: submit, list, get, the user actions (cancel, pause, resume, scale) and tags/notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from sqlalchemy.orm import Session

from backend.api.deps import (
    IdPath,
    MemberAuth,
    OptionalRedisDep,
    SessionDep,
    SettingsDep,
    TagQuery,
    TextQuery,
    ViewerAuth,
)
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import job_public
from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent
from backend.schemas.common import MAX_OFFSET
from backend.schemas.jobs import JobAnnotate, JobCreate, JobEventPublic, JobFork, JobPublic, JobScale, JobsPublic
from backend.services import budgets, forks, job_notes, json_pages, scheduling
from backend.services import jobs as job_service
from backend.services.errors import not_found
from backend.services.live import publish_live, wake_controller
from backend.services.queue_view import with_queue

router = APIRouter(prefix="/jobs", tags=["jobs"], responses=errors(*AUTHENTICATED))


def _commit_and_publish(session: Session, redis: OptionalRedisDep, job: Job, since_event_id: int) -> JobPublic:
    """Commit, then wake the controller (it acts on the change at once) and tell live viewers: the job's new state
    and the events the action recorded."""
    session.commit()
    wake_controller(redis)
    public = job_public(session, job)
    publish_live(redis, job.id, "status", public.model_dump(mode="json"))
    events = session.query(JobEvent).filter(JobEvent.job_id == job.id, JobEvent.id > since_event_id)
    for event in events.order_by(JobEvent.id):
        publish_live(redis, job.id, "event", JobEventPublic.model_validate(event).model_dump(mode="json"))
    return public


def _last_event_id(session: Session, job_id: int) -> int:
    last = session.query(JobEvent.id).filter(JobEvent.job_id == job_id).order_by(JobEvent.id.desc()).first()
    return last[0] if last else 0


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(409))
def submit_job(spec: JobCreate, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep) -> JobPublic:
    """Submit a job (member); it waits in `queued` until the controller admits it within the team's quotas."""
    scheduling.check_preemptible(auth.role, spec)
    job = job_service.create_job(session=session, team=auth.team, user=auth.user, spec=spec,
                                 api_key_id=auth.api_key.id if auth.api_key else None)
    return _commit_and_publish(session, redis, job, since_event_id=0)


@router.get("", response_model=JobsPublic)
def list_jobs(
    auth: ViewerAuth,
    session: SessionDep,
    redis: OptionalRedisDep,
    status: JobStatus | None = None,
    name: Annotated[str | None, Query(min_length=1, max_length=200, description="substring of the job name")] = None,
    tag: TagQuery = None,
    q: TextQuery = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> Response:
    """The team's jobs, newest first, filtered by status, name, tag and/or text in the name, tags or notes; a queued
    job's `queue` says where it stands and why it waits."""
    page = json_pages.jobs_page(
        session=session, team=auth.team, status=status, name=name, tag=tag, q=q, limit=limit, offset=offset
    )
    return Response(with_queue(page, session=session, client=redis, team=auth.team), media_type="application/json")


@router.get("/{job_id}", response_model=JobPublic)
def get_job(job_id: IdPath, auth: ViewerAuth, session: SessionDep, redis: OptionalRedisDep) -> Response:
    """One job with its progress and latest metrics, and while it is queued its `queue` entry (position, reason,
    what it waits for, ETA)."""
    page = json_pages.job_page(session=session, team=auth.team, job_id=job_id)
    if page is None:
        raise not_found("job", job_id)
    return Response(with_queue(page, session=session, client=redis, team=auth.team), media_type="application/json")


@router.patch("/{job_id}")
def annotate_job(
    job_id: IdPath, body: JobAnnotate, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep
) -> JobPublic:
    """Edit the job's tags (replace, or add/remove), notes and `limits` (member), in any status. A job paused by
    one of its limits resumes once the new limits have room (the controller's next pass)."""

    def edit(job: Job) -> None:
        if body.has_annotation:
            job_notes.annotate_job(session=session, job=job, change=body)
        if body.limits is not None:
            budgets.set_job_limits(session=session, job=job, limits=body.limits)

    return _act(job_id, auth, session, redis, edit)


def _act(
    job_id: int, auth: MemberAuth, session: Session, redis: OptionalRedisDep, action: Callable[[Job], object]
) -> JobPublic:
    """A user action on one of the team's jobs: load it (404), act (409/429/403 from the service), commit, publish."""
    job = job_service.get_job(session=session, team=auth.team, job_id=job_id)
    since = _last_event_id(session, job.id)
    action(job)
    return _commit_and_publish(session, redis, job, since)


@router.post("/{job_id}/cancel", responses=errors(409))
def cancel_job(job_id: IdPath, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep) -> JobPublic:
    """Cancel a job that has not finished (409 otherwise)."""
    return _act(job_id, auth, session, redis, lambda job: job_service.cancel_job(session=session, job=job))


@router.post("/{job_id}/pause", responses=errors(409))
def pause_job(job_id: IdPath, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep) -> JobPublic:
    """Pause a running job (409 otherwise); it releases its generation instances."""
    return _act(job_id, auth, session, redis, lambda job: job_service.pause_job(session=session, job=job))


@router.post("/{job_id}/resume", responses=errors(409, 429))
def resume_job(job_id: IdPath, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep) -> JobPublic:
    """Resume a paused job (409 otherwise; 429 when the team has no free job slot; 403 naming a budget it is
    over)."""
    return _act(
        job_id, auth, session, redis, lambda job: job_service.resume_job(session=session, team=auth.team, job=job)
    )


@router.post("/{job_id}/scale", responses=errors(409))
def scale_job(
    job_id: IdPath, body: JobScale, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep
) -> JobPublic:
    """Set the target generation instances and/or autoscaling (403 naming `max_generation_instances`)."""

    def scale(job: Job) -> None:
        job_service.scale_job(session=session, team=auth.team, job=job, target_instances=body.target_instances,
                              autoscale=body.autoscale)

    return _act(job_id, auth, session, redis, scale)


@router.post("/{job_id}/fork", status_code=status.HTTP_201_CREATED, responses=errors(409))
def fork_job(
    job_id: IdPath, body: JobFork, auth: MemberAuth, session: SessionDep, redis: OptionalRedisDep, settings: SettingsDep
) -> JobPublic:
    """Start a new job (member) from this job's checkpoint of `iteration` with `overrides` applied to its spec
    (learning rate, reward, dataset, mode...; not `model` or `algorithm.name`): it records `parent_job_id` and
    `parent_iteration`, starts from that checkpoint's weights and optimizer state and counts iterations on from it.
    422 naming the iteration when there is no such checkpoint; 404 for another team's job."""
    parent = job_service.get_job(session=session, team=auth.team, job_id=job_id)
    source = forks.parent_checkpoint(session, parent, body.iteration, settings.artifacts)
    spec = forks.fork_spec(parent, body.iteration, body.overrides)
    scheduling.check_preemptible(auth.role, spec)
    fork = forks.fork_job(session=session, team=auth.team, user=auth.user, parent=parent, iteration=body.iteration,
                          spec=spec, source=source, changed=sorted(body.overrides), artifacts=settings.artifacts,
                          api_key_id=auth.api_key.id if auth.api_key else None)
    return _commit_and_publish(session, redis, fork, since_event_id=0)
