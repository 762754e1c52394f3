"""The job state machine and admission within quotas, through the services on real Postgres."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from backend.db.enums import JOB_TRANSITIONS, TERMINAL_JOB_STATUSES, JobStatus, can_transition
from backend.db.models import Job, JobEvent
from backend.services.admission import admit_queued_jobs
from backend.services.errors import InvalidTransition
from backend.services.jobs import record_event, record_iteration, transition_job

LIFECYCLE = [JobStatus.starting, JobStatus.running, JobStatus.paused, JobStatus.running, JobStatus.succeeded]


def test_transition_table_matches_the_documented_lifecycle() -> None:
    for current, to in zip([JobStatus.queued, *LIFECYCLE], LIFECYCLE, strict=False):
        assert can_transition(current, to), (current, to)
    assert {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled} == TERMINAL_JOB_STATUSES
    for status in (JobStatus.queued, JobStatus.starting, JobStatus.running, JobStatus.paused):
        assert can_transition(status, JobStatus.cancelled)
    assert not can_transition(JobStatus.queued, JobStatus.running)
    assert not can_transition(JobStatus.paused, JobStatus.succeeded)
    assert set(JOB_TRANSITIONS) == set(JobStatus)


def _job(backend: Any, team: Any, *, status: JobStatus = JobStatus.queued, target: int = 1) -> Job:
    with backend.session() as session:
        job = Job(
            team_id=team.id, name="j", spec={"training": {"iterations": 3}}, status=status, target_instances=target
        )
        session.add(job)
    return job


def test_transitions_stamp_times_and_record_events(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    job = _job(pg_backend, team)
    with pg_backend.session() as session:
        job = session.get(Job, job.id)
        for status in LIFECYCLE:
            transition_job(session=session, job=job, to=status)
        assert job.started_at is not None and job.finished_at is not None
    with pg_backend.session() as session:
        kinds = session.scalars(select(JobEvent.message).where(JobEvent.job_id == job.id).order_by(JobEvent.id)).all()
    assert kinds == [
        "queued -> starting",
        "starting -> running",
        "running -> paused",
        "paused -> running",
        "running -> succeeded",
    ]


def test_invalid_transition_raises_with_current_status_and_changes_nothing(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    job = _job(pg_backend, team, status=JobStatus.succeeded)
    with pytest.raises(InvalidTransition) as caught, pg_backend.session() as session:
        transition_job(session=session, job=session.get(Job, job.id), to=JobStatus.cancelled)
    assert caught.value.extra == {"current_status": "succeeded"}
    with pg_backend.session() as session:
        assert session.get(Job, job.id).status == JobStatus.succeeded
        assert session.scalars(select(JobEvent).where(JobEvent.job_id == job.id)).all() == []


def test_admission_respects_both_quotas_oldest_first(pg_backend: Any) -> None:
    team = pg_backend.make_team(max_concurrent_jobs=2, max_generation_instances=4)
    first = _job(pg_backend, team, target=3)
    too_big_now = _job(pg_backend, team, target=2)  # 3 + 2 > 4: skipped, a smaller job behind it may go
    small = _job(pg_backend, team, target=1)
    waiting = _job(pg_backend, team, target=1)  # no job slot left
    with pg_backend.session() as session:
        admitted = admit_queued_jobs(session=session)
    assert [j.id for j in admitted if j.team_id == team.id] == [first.id, small.id]
    with pg_backend.session() as session:
        statuses = {j.id: j.status for j in session.scalars(select(Job).where(Job.team_id == team.id))}
    assert statuses == {
        first.id: JobStatus.starting,
        too_big_now.id: JobStatus.queued,
        small.id: JobStatus.starting,
        waiting.id: JobStatus.queued,
    }


def test_record_iteration_is_idempotent_and_advances_progress(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    job = _job(pg_backend, team, status=JobStatus.running)
    with pg_backend.session() as session:
        record_iteration(session=session, job_id=job.id, iteration=1, metrics={"reward_mean": 0.1})
        record_iteration(session=session, job_id=job.id, iteration=1, metrics={"reward_mean": 0.2})
        record_event(session=session, job_id=job.id, kind="worker", message="hello", data={"x": 1})
    with pg_backend.session() as session:
        assert session.get(Job, job.id).current_iteration == 1
