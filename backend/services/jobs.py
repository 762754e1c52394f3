"""Jobs: submission, the enforced state machine, user actions (cancel/pause/resume/scale) and quotas (admission by
the scheduler: backend/services/admission.py).

Desired state lives here (status, target_instances); the controller reconciles the running world towards it.
Quota rules: `max_concurrent_jobs` caps jobs in ACTIVE_JOB_STATUSES (starting, running; a paused job has released
its resources); `max_generation_instances` caps the sum of `target_instances` over a team's active jobs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.enums import ACTIVE_JOB_STATUSES, TERMINAL_JOB_STATUSES, JobStatus, can_transition
from backend.db.models import Dataset, Job, JobEvent, Team, User
from backend.planner.service import suggest_instances
from backend.services.agent_requirements import check_agent_requirements
from backend.services.agent_url import check_agent_url
from backend.services.alerts import enqueue_for_event
from backend.services.budgets import check_resumable, check_team_budget
from backend.services.datasets import require_ready
from backend.services.distill import check_teacher
from backend.services.egress import EgressRefused, check_url
from backend.services.errors import InvalidInput, InvalidTransition, QuotaExceeded, not_found
from backend.services.evaluations import check_suites
from backend.services.graders import grader_models, is_reward_model
from backend.services.job_data import (
    record_iteration,  # noqa: F401  (re-exported for writers)
    summary_columns,
)
from backend.services.job_notes import has_tag, matches_text
from backend.services.models import find_model
from backend.services.scheduling import team_priority
from backend.services.trackers import register_runs
from contract.environments import VERIFIERS
from contract.rewards import validate_reward_spec
from contract.settings import get_settings
from contract.spec import JobSpec


@dataclass(frozen=True)
class TrainingSlots:
    """The training pool as the controller sees it: registered slots and those free now. Jobs sharing a training
    process (`JobSpec.shares_training`) hold one slot per process: `room` says, per base model, how many more jobs
    the processes already counted take, and `shared_base` names a queued job's base model when it would share."""

    slots: int
    free: int
    room: dict[str, int] = field(default_factory=dict)
    shared_base: Callable[[Job], str | None] = lambda job: None

    def needed(self, job: Job, room: dict[str, int]) -> int:
        """Slots admitting `job` takes, given (and updating) the room left in shared processes."""
        base = self.shared_base(job)
        if base is None:
            return job_devices(job)
        if room.get(base, 0) > 0:
            room[base] -= 1
            return 0
        room[base] = shared_training_jobs() - 1  # a new process, this job its first
        return 1


def shared_training_jobs() -> int:
    """Jobs one shared training process holds at most (STREAMRL_SHARED_TRAINING_JOBS, default 4)."""
    return max(1, int(os.environ.get("STREAMRL_SHARED_TRAINING_JOBS", "4")))


def initial_target_instances(spec: JobSpec, max_instances: int) -> int:
    """The spec's explicit instance count, else the planner's suggestion capped by the team quota."""
    if spec.generation.instances is not None:
        return spec.generation.instances
    return suggest_instances(spec, max_instances)


def _check_instance_quota(team: Team, requested: int, in_use_by_others: int) -> None:
    limit = team.max_generation_instances
    if requested > limit or in_use_by_others + requested > limit:
        raise QuotaExceeded(
            f"quota max_generation_instances ({limit}) exceeded: {requested} requested, "
            f"{in_use_by_others} in use by the team's other active jobs",
            quota="max_generation_instances",
            limit=limit,
        )


def create_job(*, session: Session, team: Team, user: User, spec: JobSpec, api_key_id: int | None = None) -> Job:
    """A queued job; refuses unregistered models, other teams' datasets and server paths, and any job while the
    team's monthly budget is used up. `api_key_id`: the key that submitted it (its usage is reported under it)."""
    check_team_budget(session, team)
    spec = team_priority(team, spec)  # 422 above the team's max_priority; unset: the default, at most that
    model = find_model(session=session, team_id=team.id, name=spec.model)
    if model is None:
        raise InvalidInput(
            f"model {spec.model!r} is not registered for this team (POST /models)", loc=("body", "model")
        )
    if model.state != "ready":
        why = f": {model.error}" if model.state == "failed" and model.error else " (wait until it is ready)"
        raise InvalidInput(f"model {spec.model!r} is {model.state}, not ready{why}", loc=("body", "model"))
    if is_reward_model(model.card):
        raise InvalidInput(f"model {spec.model!r} is a sequence-classification reward model, not a policy: use it in "
                           f"`reward` (type `model`)", loc=("body", "model"))
    if spec.tokenizer is not None and find_model(session=session, team_id=team.id, name=spec.tokenizer) is None:
        raise InvalidInput(f"tokenizer {spec.tokenizer!r} is not a registered model", loc=("body", "tokenizer"))
    if spec.grading is not None:
        reward, place = spec.grading
        try:
            validate_reward_spec(reward)
        except ValueError as err:
            raise InvalidInput(str(err), loc=("body", *place)) from err
        grader_models(session, team.id, reward, ("body", *place))  # 422 at the model field a grader names
    check_teacher(session, team.id, spec, model)  # distill: 404 unknown teacher, 422 another tokenizer
    if spec.dataset.path is not None:
        raise InvalidInput(
            "dataset.path is only for train-local; upload the file (POST /datasets)", loc=("body", "dataset", "path")
        )
    if spec.dataset.id is not None:
        dataset = session.scalar(select(Dataset).where(Dataset.id == spec.dataset.id, Dataset.team_id == team.id))
        if dataset is None:
            raise InvalidInput(f"dataset {spec.dataset.id} not found in this team", loc=("body", "dataset", "id"))
        require_ready(dataset, ("body", "dataset", "id"))
    check_suites(session, team.id, spec)  # 422 at evaluation[i]: a suite's reward or dataset
    if spec.environment is not None and spec.environment.url is not None:  # an OpenEnv or verifiers env server
        try:
            check_url(spec.environment.url, get_settings(), tcp=spec.environment.type == VERIFIERS)
        except EgressRefused as exc:
            raise InvalidInput(f"`url` is refused: {exc}", loc=("body", "environment", "url")) from None
    check_agent_requirements(spec)  # 422 at agent.requirements: pip cannot resolve them
    check_agent_url(spec)  # 422 at agent.url: the egress policy refuses it
    target = initial_target_instances(spec, team.max_generation_instances)
    _check_instance_quota(team, target, 0)
    job = Job(
        team_id=team.id,
        created_by_id=user.id,
        created_by_key_id=api_key_id,
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        status=JobStatus.queued,
        target_instances=target,
        autoscale=spec.autoscale.policy == "auto",
        model_id=model.id,  # the newest version now; the job keeps it when the name gets a newer one
    )
    session.add(job)
    session.flush()
    register_runs(session=session, team=team, job=job, spec=spec)  # 422 for a tracker the team cannot reach
    record_event(session=session, job_id=job.id, kind="created", message=f"job submitted by {user.email}")
    return job


def get_job(*, session: Session, team: Team, job_id: int) -> Job:
    job = session.scalar(select(Job).where(Job.id == job_id, Job.team_id == team.id))
    if job is None:
        raise not_found("job", job_id)
    return job


JobRow = tuple[Job, int, int, dict[str, Any] | None, str | None]  # job, running and pending instances, latest metrics,
# creator email


def get_job_row(*, session: Session, team: Team, job_id: int) -> JobRow:
    """One of the team's jobs with its summary, in one query (404 otherwise)."""
    row = session.execute(select(Job, *summary_columns()).where(Job.id == job_id, Job.team_id == team.id)).first()
    if row is None:
        raise not_found("job", job_id)
    job, running, pending, latest, email = row
    return job, int(running), int(pending), latest, email


def list_jobs(
    *, session: Session, team: Team, status: JobStatus | None, name: str | None, limit: int, offset: int,
    tag: str | None = None, q: str | None = None,
) -> tuple[list[JobRow], int]:
    """A page of the team's jobs, newest first, with their summaries, and the total matching: one round trip (the
    total is a window count) unless the page is empty."""
    where = team_jobs_where(team, status, name, tag=tag, q=q)
    listing = select(Job, *summary_columns(), func.count().over()).where(*where).order_by(Job.id.desc())
    page = session.execute(listing.limit(limit).offset(offset)).all()
    if page:
        rows = [(job, int(running), int(pending), latest, email) for job, running, pending, latest, email, _ in page]
        return rows, int(page[0][-1])
    return [], count_jobs(session, where)


def team_jobs_where(
    team: Team, status: JobStatus | None, name: str | None, *, tag: str | None = None, q: str | None = None
) -> list[ColumnElement[bool]]:
    """The filter of a team's job listing: by status, a substring of the name, a tag, and/or text found in the
    name, tags or notes (case-insensitive)."""
    where = [Job.team_id == team.id]
    if status is not None:
        where.append(Job.status == status)
    if name:
        where.append(Job.name.contains(name, autoescape=True))
    if tag:
        where.append(has_tag(tag))
    if q:
        where.append(matches_text(q))
    return where


def count_jobs(session: Session, where: Sequence[ColumnElement[bool]]) -> int:
    return session.scalar(select(func.count()).select_from(Job).where(*where)) or 0


def record_event(
    *, session: Session, job_id: int, kind: str, message: str, data: dict[str, Any] | None = None
) -> JobEvent:
    event = JobEvent(job_id=job_id, kind=kind, message=message, data=data)
    session.add(event)
    session.flush()
    enqueue_for_event(session, event)  # notifications commit with their event (sent later by the controller)
    return event


def transition_job(*, session: Session, job: Job, to: JobStatus, error: str | None = None) -> Job:
    """Move `job` to `to` if the state machine allows it; `InvalidTransition` (409 + current status) otherwise."""
    current = JobStatus(job.status)
    if not can_transition(current, to):
        raise InvalidTransition(f"job {job.id} cannot go from {current} to {to}", current_status=current.value)
    job.status = to
    if to == JobStatus.running and job.started_at is None:
        job.started_at = utcnow()
    if to in TERMINAL_JOB_STATUSES:
        job.finished_at = utcnow()
    if error is not None:
        job.error = error
    record_event(
        session=session,
        job_id=job.id,
        kind="status",
        message=f"{current} -> {to}" + (f": {error}" if error else ""),
        data={"from": current.value, "to": to.value},
    )
    return job


def _active_usage(session: Session, team_id: int, exclude_job_id: int | None = None) -> tuple[int, int]:
    """(active jobs, generation instances they target) of a team, not counting `exclude_job_id`."""
    query = select(func.count(Job.id), func.coalesce(func.sum(Job.target_instances), 0)).where(
        Job.team_id == team_id, Job.status.in_(ACTIVE_JOB_STATUSES)
    )
    if exclude_job_id is not None:
        query = query.where(Job.id != exclude_job_id)
    jobs, instances = session.execute(query).one()
    return int(jobs), int(instances)


def cancel_job(*, session: Session, job: Job) -> Job:
    return transition_job(session=session, job=job, to=JobStatus.cancelled)


def pause_job(*, session: Session, job: Job) -> Job:
    return transition_job(session=session, job=job, to=JobStatus.paused)


def resume_job(*, session: Session, team: Team, job: Job) -> Job:
    """paused -> running; the job takes its resources back, so both quotas apply (429 when no job slot is free).
    failed -> queued: the controller admits it again and its driver continues from the newest checkpoint (a new
    driver epoch, the restart budget refilled)."""
    if job.status == JobStatus.failed:
        job.driver_epoch += 1
        job.driver_failures = 0
        job.finished_at = None
        transition_job(session=session, job=job, to=JobStatus.queued)
        job.error = None
        return job
    if job.status == JobStatus.paused:
        check_resumable(session, team, job)  # 403 naming a budget it is over
        job.paused_for = None
        active, instances = _active_usage(session, team.id, exclude_job_id=job.id)
        if active >= team.max_concurrent_jobs:
            raise QuotaExceeded(
                f"quota max_concurrent_jobs ({team.max_concurrent_jobs}) reached: {active} jobs active",
                quota="max_concurrent_jobs",
                limit=team.max_concurrent_jobs,
                status_code=429,
            )
        _check_instance_quota(team, job.target_instances, instances)
    return transition_job(session=session, job=job, to=JobStatus.running)


def scale_job(*, session: Session, team: Team, job: Job, target_instances: int | None, autoscale: bool | None) -> Job:
    """Set the desired generation instances and/or the autoscale flag of a non-finished job."""
    if job.status in TERMINAL_JOB_STATUSES:
        raise InvalidTransition(f"job {job.id} is {job.status}: it cannot be scaled", current_status=job.status)
    changes: dict[str, Any] = {}
    if target_instances is not None:
        in_use = _active_usage(session, team.id, exclude_job_id=job.id)[1] if job.status in ACTIVE_JOB_STATUSES else 0
        _check_instance_quota(team, target_instances, in_use)
        changes["target_instances"] = {"from": job.target_instances, "to": target_instances}
        job.target_instances = target_instances
    if autoscale is not None:
        changes["autoscale"] = {"from": job.autoscale, "to": autoscale}
        job.autoscale = autoscale
    if changes:
        summary = ", ".join(f"{key} {c['from']} -> {c['to']}" for key, c in changes.items())
        record_event(session=session, job_id=job.id, kind="scale", message=summary, data=changes)
    session.flush()
    return job


def job_devices(job: Job) -> int:
    """Training slots the job holds while it runs: its driver (rank 0) and `training.devices` - 1 other ranks."""
    return int((job.spec.get("training") or {}).get("devices", 1) or 1)


