"""What a running job records (iterations, samples, timeline spans, checkpoints) and the reads the API serves.

Writers are the workers and the controller; every write is idempotent on its natural key so a retried task is safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Text, cast, func, select
from sqlalchemy.orm import Session

from backend.db.enums import LIVE_INSTANCE_STATUSES
from backend.db.models import (
    Checkpoint,
    GenerationInstance,
    Iteration,
    Job,
    JobEvent,
    JobSample,
    TimelineSpan,
    User,
)
from backend.services.strict_json import finite_or_null
from backend.services.usage import record_iteration_usage

SILENT_AFTER_S = 30.0  # a running instance whose heartbeat is older than this is silent (neither running nor pending)


def record_iteration(*, session: Session, job_id: int, iteration: int, metrics: dict[str, Any]) -> Iteration:
    """Insert or replace the metrics of one iteration (non-finite numbers stored as null) and the usage it records
    (backend/services/usage.py); advances `job.current_iteration`."""
    metrics = finite_or_null(metrics)
    row = session.scalar(select(Iteration).where(Iteration.job_id == job_id, Iteration.iteration == iteration))
    if row is None:
        row = Iteration(job_id=job_id, iteration=iteration, metrics=metrics)
        session.add(row)
    else:
        row.metrics = metrics
    job = session.get(Job, job_id)
    if job is not None and iteration > job.current_iteration:
        job.current_iteration = iteration
    if job is not None:
        record_iteration_usage(session=session, job=job, iteration=iteration, metrics=metrics)
    session.flush()
    return row


TEXT_COLUMNS = ("prompt", "response", "reward_error")


def storable(sample: dict[str, Any]) -> dict[str, Any]:
    """A sample row a text column can hold: a model may generate a NUL byte (byte-level BPE decodes any byte), which
    PostgreSQL text refuses; it is stored as U+FFFD."""
    return {key: value.replace("\x00", "\ufffd") if key in TEXT_COLUMNS and isinstance(value, str) else value
            for key, value in sample.items()}


def record_samples(*, session: Session, job_id: int, samples: Iterable[dict[str, Any]]) -> int:
    """Store finished samples for the dashboard (keys: JobSample columns); duplicates by sample_id are skipped."""
    rows = list(samples)
    known = set(
        session.scalars(
            select(JobSample.sample_id).where(
                JobSample.job_id == job_id, JobSample.sample_id.in_([r["sample_id"] for r in rows])
            )
        )
    )
    fresh = [JobSample(job_id=job_id, **storable(r)) for r in rows if r["sample_id"] not in known]
    session.add_all(fresh)
    session.flush()
    return len(fresh)


def get_sample(*, session: Session, job_id: int, sample_id: str) -> JobSample | None:
    return session.scalar(select(JobSample).where(JobSample.job_id == job_id, JobSample.sample_id == sample_id))


def record_spans(*, session: Session, job_id: int, spans: Iterable[dict[str, Any]]) -> None:
    """Append timeline spans: dicts with lane, kind, start, end (epoch seconds)."""
    session.add_all(TimelineSpan(job_id=job_id, **span) for span in spans)
    session.flush()


def record_checkpoint(*, session: Session, job_id: int, iteration: int, path: str) -> Checkpoint:
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.iteration == iteration))
    if row is None:
        row = Checkpoint(job_id=job_id, iteration=iteration, path=path)
        session.add(row)
    row.path = path
    session.flush()
    return row


def silent_cutoff() -> datetime:
    """Instances that last beat before this are silent (neither running nor pending)."""
    return datetime.now(UTC) - timedelta(seconds=SILENT_AFTER_S)


def summary_columns(cutoff: Any = None) -> tuple[Any, Any, Any, Any]:
    """A job's summary as scalar subqueries correlated to `Job`, so a listing (or one job) comes in one round trip:
    (running generation instances, pending ones, latest iteration metrics, creator email). Running = heart-beating
    within SILENT_AFTER_S (as the job's health counts them); pending = asked for, never picked up by a worker; a
    silent instance is neither (the health endpoint lists it). `cutoff`: `silent_cutoff()` now, or a bind parameter
    for a statement built once and executed many times (its value: `silent_cutoff()` at each execution)."""
    live = (GenerationInstance.job_id == Job.id, GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES))
    cutoff = silent_cutoff() if cutoff is None else cutoff
    running = select(func.count()).where(*live, GenerationInstance.heartbeat_at >= cutoff).correlate(Job)
    pending = select(func.count()).where(*live, GenerationInstance.heartbeat_at.is_(None)).correlate(Job)
    latest = (
        select(Iteration.metrics)
        .where(Iteration.job_id == Job.id)
        .order_by(Iteration.iteration.desc())
        .limit(1)
        .correlate(Job)
        .scalar_subquery()
    )
    email = select(User.email).where(User.id == Job.created_by_id).correlate(Job).scalar_subquery()
    return running.scalar_subquery(), pending.scalar_subquery(), latest, email


def list_events(*, session: Session, job_id: int, after_id: int, limit: int) -> list[JobEvent]:
    query = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after_id).order_by(JobEvent.id)
    return list(session.scalars(query.limit(limit)))


def iteration_rows(
    *, session: Session, team_id: int, job_id: int, after: int, limit: int
) -> list[tuple[int, str, datetime]] | None:
    """The team's job's iterations after `after` as (iteration, metrics as stored JSON text, created_at), or None
    when the job is not the team's: one query (the job outer-joined to its rows), no ORM objects and no JSON decode,
    for the page dashboards poll (`json_pages.iterations_page_json`; PostgreSQL renders it itself)."""
    newer = (Iteration.job_id == Job.id) & (Iteration.iteration > after)
    query = (
        select(Job.id, Iteration.iteration, cast(Iteration.metrics, Text), Iteration.created_at)
        .outerjoin(Iteration, newer)
        .where(Job.id == job_id, Job.team_id == team_id)
        .order_by(Iteration.iteration)
        .limit(limit)
    )
    rows = session.execute(query).all()
    if not rows:
        return None
    return [(iteration, text, created) for _, iteration, text, created in rows if iteration is not None]


def list_samples(*, session: Session, job_id: int, iteration: int | None, limit: int) -> list[JobSample]:
    query = select(JobSample).where(JobSample.job_id == job_id)
    if iteration is not None:
        query = query.where(JobSample.iteration == iteration)
    return list(session.scalars(query.order_by(JobSample.id.desc()).limit(limit)))


def list_spans(*, session: Session, job_id: int, since: float, limit: int = 5000) -> list[TimelineSpan]:
    query = select(TimelineSpan).where(TimelineSpan.job_id == job_id, TimelineSpan.end >= since)
    return list(session.scalars(query.order_by(TimelineSpan.start).limit(limit)))


def list_checkpoints(*, session: Session, job_id: int, stored: set[int] | None = None) -> list[Checkpoint]:
    """The job's checkpoints that exist on disk or, `stored`, whose iteration the artifact store holds complete
    (contract/artifact_store/checkpoints.py `stored_iterations`: a host with no shared disk); a row whose checkpoint
    was deleted by retention or by hand is not offered: nothing could load it."""
    rows = session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.iteration))
    return [row for row in rows if (stored is not None and row.iteration in stored) or Path(row.path).is_dir()]
