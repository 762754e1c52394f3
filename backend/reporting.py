"""`DatabaseReporter`: the control plane's side of the runtime's `Reporter` (database rows + live channel).

Each call is one short transaction; what the database recorded is then published on the job's live channel (best
effort: the database is the record). Status changes go through `transition_job`, so the runtime can never perform a
transition the state machine forbids. A database that is unreachable (restart, failover) is retried with backoff for
up to `OUTAGE_S`; after that the call raises and the runtime leaves the job's state to the controller.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import redis
from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session

from backend.db import Dataset, GenerationInstance, Job
from backend.db.enums import can_transition
from backend.db.session import session_scope
from backend.schemas.jobs import JobEventPublic
from backend.services import evaluations
from backend.services.job_data import record_checkpoint, record_iteration, record_samples, record_spans
from backend.services.jobs import record_event, transition_job
from backend.services.live import publish_live
from backend.services.models import find_model, job_model
from contract import liveness
from contract.reporter import JobRecord, Reporter
from contract.rewards.model_graders import model_refs
from contract.spec import JobSpec
from contract.states import LIVE_INSTANCE_STATUSES, TERMINAL_JOB_STATUSES, InstanceStatus, JobStatus

log = logging.getLogger(__name__)


OUTAGE_S = 120.0
T = TypeVar("T")


def _retrying(call: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        deadline, delay = time.monotonic() + OUTAGE_S, 0.2
        while True:
            try:
                return call(*args, **kwargs)
            except (OperationalError, InterfaceError) as err:  # connection-level: the statement never ran
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("database unreachable (%s); retrying %s in %.1fs", type(err).__name__, call.__name__,
                            delay)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
    return wrapper


class DatabaseReporter(Reporter):
    def __init__(self, client: redis.Redis | None):
        self.client = client  # live channel and the driver's heartbeat key

    # -- reads ---------------------------------------------------------------------------------------------------------
    @_retrying
    def load_job(self, job_id: int) -> JobRecord | None:
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is None:
                return None
            spec = JobSpec.model_validate(job.spec)
            model = job_model(session, job)  # the version it was submitted with
            dataset_path = None
            if spec.dataset.id is not None:
                dataset = session.get(Dataset, spec.dataset.id)
                if dataset is not None and dataset.team_id == job.team_id:
                    dataset_path = dataset.storage_path
            graders = {name: find_model(session=session, team_id=job.team_id, name=name)
                       for _, _, name in (model_refs(spec.grading[0]) if spec.grading else [])}
            teacher = (find_model(session=session, team_id=job.team_id, name=spec.algorithm.teacher)
                       if spec.algorithm.teacher else None)
            return JobRecord(job_id=job.id, team_id=job.team_id, spec=spec, status=JobStatus(job.status),
                             model_path=model.path if model is not None else None, dataset_path=dataset_path,
                             epoch=job.driver_epoch, recorded_through=job.current_iteration,
                             grader_models={name: m.path for name, m in graders.items() if m is not None},
                             teacher_path=teacher.path if teacher is not None else None)

    @_retrying
    def job_status(self, job_id: int) -> JobStatus | None:
        with session_scope() as session:
            job = session.get(Job, job_id)
            return JobStatus(job.status) if job is not None else None

    @_retrying
    def driver_epoch(self, job_id: int) -> int | None:
        with session_scope() as session:
            return session.scalar(select(Job.driver_epoch).where(Job.id == job_id))

    @_retrying
    def instance_states(self, job_id: int) -> dict[str, InstanceStatus]:
        with session_scope() as session:
            rows = session.execute(select(GenerationInstance.instance_id, GenerationInstance.status)
                                   .where(GenerationInstance.job_id == job_id).order_by(GenerationInstance.id))
            return {iid: InstanceStatus(status) for iid, status in rows}

    @_retrying
    def load_ptl(self, job_id: int) -> list[list[float]] | None:
        with session_scope() as session:
            job = session.get(Job, job_id)
            raw = job.ptl_profile if job is not None else None
        return raw.get("points") if raw else None

    # -- writes --------------------------------------------------------------------------------------------------------
    @_retrying
    def set_job_status(self, job_id: int, to: JobStatus, error: str | None = None) -> None:
        with session_scope() as session:
            # locked: a status read here and changed meanwhile by the API or the controller is never written over
            job = session.get(Job, job_id, with_for_update=True)
            if job is None or job.status == to or JobStatus(job.status) in TERMINAL_JOB_STATUSES:
                return
            if to == JobStatus.running and job.status not in (JobStatus.starting, JobStatus.queued):
                return  # already running (resumed driver) or paused by a user meanwhile
            if not can_transition(JobStatus(job.status), to) and to != JobStatus.running:
                return  # e.g. a parked session's call already queued it again and the controller admitted it
            if to == JobStatus.running and job.status == JobStatus.queued:
                transition_job(session=session, job=job, to=JobStatus.starting)
            transition_job(session=session, job=job, to=to, error=error)
        publish_live(self.client, job_id, "status", {"id": job_id, "status": str(to), "error": error})

    @_retrying
    def record_iteration(self, job_id: int, iteration: int, metrics: dict[str, Any],
                         samples: list[dict[str, Any]]) -> None:
        with session_scope() as session:
            record_iteration(session=session, job_id=job_id, iteration=iteration, metrics=metrics)
            record_samples(session=session, job_id=job_id, samples=samples)
        publish_live(self.client, job_id, "metrics", {"iteration": iteration, "metrics": metrics})
        publish_live(self.client, job_id, "samples", samples)

    @_retrying
    def record_checkpoint(self, job_id: int, iteration: int, path: str) -> None:
        with session_scope() as session:
            record_checkpoint(session=session, job_id=job_id, iteration=iteration, path=path)

    @_retrying
    def record_event(self, job_id: int, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        with session_scope() as session:
            event = record_event(session=session, job_id=job_id, kind=kind, message=message, data=data)
            public = JobEventPublic.model_validate(event).model_dump(mode="json")
        publish_live(self.client, job_id, "event", public)

    @_retrying
    def request_evaluations(self, job_id: int, iteration: int, path: str) -> int:
        if self.client is None:
            return 0
        return len(evaluations.request_for_checkpoint(self.client, job_id, iteration, path))

    @_retrying
    def pending_evaluations(self, job_id: int) -> int:
        return evaluations.pending(job_id)

    @_retrying
    def checkpoint_metric(self, job_id: int, metric: str) -> dict[int, float | None]:
        return evaluations.checkpoint_values(job_id, metric)

    @_retrying
    def record_spans(self, job_id: int, spans: list[dict[str, Any]]) -> None:
        with session_scope() as session:
            record_spans(session=session, job_id=job_id, spans=spans)
        publish_live(self.client, job_id, "timeline", spans)

    @_retrying
    def save_ptl(self, job_id: int, points: list[list[float]]) -> None:
        with session_scope() as session:
            job = session.get(Job, job_id)
            if job is not None:
                job.ptl_profile = {"points": points}

    # -- liveness ------------------------------------------------------------------------------------------------------
    def beat_driver(self, job_id: int) -> None:
        assert self.client is not None, "the driver's heartbeat lives in Redis"
        liveness.beat_driver(self.client, job_id)

    @_retrying
    def claim_instance(self, job_id: int, instance_id: str) -> bool:
        with session_scope() as session:
            row = _instance(session, job_id, instance_id)
            if row is not None and row.status == InstanceStatus.stopping and row.heartbeat_at is None:
                # scaled away before it ran: it never read its stream, so the driver may re-dispatch all of it now
                row.status, row.stopped_at = InstanceStatus.stopped, datetime.now(UTC)
            return row is not None and row.status in LIVE_INSTANCE_STATUSES

    @_retrying
    def beat_instance(self, job_id: int, instance_id: str, host: str) -> bool:
        with session_scope() as session:
            row = _instance(session, job_id, instance_id)
            if row is None or row.status not in LIVE_INSTANCE_STATUSES:
                return False
            row.heartbeat_at, row.hostname = datetime.now(UTC), host or socket.gethostname()
            return True

    @_retrying
    def set_instance_status(self, job_id: int, instance_id: str, status: InstanceStatus,
                            error: str | None = None) -> None:
        with session_scope() as session:
            row = _instance(session, job_id, instance_id)
            if row is None:
                return
            if status == InstanceStatus.running and row.status == InstanceStatus.starting:
                row.status = status
            elif status in (InstanceStatus.stopped, InstanceStatus.dead) and row.status != InstanceStatus.dead:
                row.status, row.stopped_at, row.error = status, datetime.now(UTC), error
        if error is not None:
            self.record_event(job_id, "worker", f"instance {instance_id} failed: {error}",
                              {"instance_id": instance_id, "error": error})


def _instance(session: Session, job_id: int, instance_id: str) -> GenerationInstance | None:
    return session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == job_id,
                                                           GenerationInstance.instance_id == instance_id))
