"""`Reporter`: the one narrow door between the runtime and the control plane.

The runtime (drivers, instances, train-local) reads what it needs about a job and records what happened only through
this interface; it never opens a database session. Implementations:
- `backend.reporting.DatabaseReporter`: rows in Postgres/SQLite plus the live pub/sub channel (the platform);
- `MemoryReporter` below: plain lists in memory (train-local and unit tests).

Invariants every implementation keeps: `record_iteration` is idempotent per (job, iteration); `set_job_status` only
performs transitions the control plane's state machine allows and ignores the rest (a cancelled job stays cancelled);
instance states change only for rows the control plane created (`claim_instance` answers whether it is still wanted).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from contract.spec import JobSpec
from contract.states import LIVE_INSTANCE_STATUSES, TERMINAL_JOB_STATUSES, InstanceStatus, JobStatus


@dataclass(frozen=True)
class JobRecord:
    """What the runtime knows about a job when it starts."""

    job_id: int
    team_id: int
    spec: JobSpec
    status: JobStatus
    model_path: str | None  # the team's registered model of that name (None: not registered)
    dataset_path: str | None  # the uploaded dataset's file when the spec names one by id
    epoch: int = 0  # the driver epoch (see backend.db.models.jobs.Job.driver_epoch): part of every request id
    # the newest iteration whose row is recorded (None: unknown); a driver resumes from no checkpoint newer than it
    recorded_through: int | None = None
    # the team's registered models the reward's model-backed graders name: name -> directory (absent: not registered)
    grader_models: dict[str, str] = field(default_factory=dict)
    teacher_path: str | None = None  # algorithm.teacher's directory (distill; None: no teacher or not registered)


class Reporter(ABC):
    # -- reads ---------------------------------------------------------------------------------------------------------
    @abstractmethod
    def load_job(self, job_id: int) -> JobRecord | None: ...

    @abstractmethod
    def job_status(self, job_id: int) -> JobStatus | None: ...

    @abstractmethod
    def driver_epoch(self, job_id: int) -> int | None:
        """The job's current driver epoch: a driver whose epoch is older was superseded and must stop."""

    @abstractmethod
    def instance_states(self, job_id: int) -> dict[str, InstanceStatus]:
        """Every instance row of the job: instance id -> status."""

    @abstractmethod
    def load_ptl(self, job_id: int) -> list[list[float]] | None:
        """The job's stored PTL(BS) profile points (see `contract.skew.ptl_from_json`), None before profiling."""

    # -- writes --------------------------------------------------------------------------------------------------------
    @abstractmethod
    def set_job_status(self, job_id: int, to: JobStatus, error: str | None = None) -> None: ...

    @abstractmethod
    def record_iteration(self, job_id: int, iteration: int, metrics: dict[str, Any],
                         samples: list[dict[str, Any]]) -> None:
        """Iteration `iteration` (1-based) finished: its metrics row and a few of its samples."""

    @abstractmethod
    def record_checkpoint(self, job_id: int, iteration: int, path: str) -> None: ...

    @abstractmethod
    def record_event(self, job_id: int, kind: str, message: str, data: dict[str, Any] | None = None) -> None: ...

    @abstractmethod
    def record_spans(self, job_id: int, spans: list[dict[str, Any]]) -> None:
        """Timeline spans `{lane, kind, start, end}` (the dashboard's pipeline view)."""

    @abstractmethod
    def save_ptl(self, job_id: int, points: list[list[float]]) -> None: ...

    # -- liveness ------------------------------------------------------------------------------------------------------
    @abstractmethod
    def beat_driver(self, job_id: int) -> None:
        """The job's driver is alive (the controller declares it dead when beats stop)."""

    @abstractmethod
    def claim_instance(self, job_id: int, instance_id: str) -> bool:
        """A worker picked up the instance's task: True when the instance is still wanted (it may run)."""

    @abstractmethod
    def beat_instance(self, job_id: int, instance_id: str, host: str) -> bool:
        """The instance is alive; returns False when it should stop (row gone, stopping or declared dead)."""

    @abstractmethod
    def set_instance_status(self, job_id: int, instance_id: str, status: InstanceStatus,
                            error: str | None = None) -> None:
        """`running` once it produces; `stopped` when it exits; `dead` with the `error` when its task failed (the
        controller stops replacing instances that keep failing the same way). A `dead` row stays dead."""

    # -- evaluation suites (contract/evaluation.py); a reporter without a control plane runs none ------------------
    def request_evaluations(self, job_id: int, iteration: int, path: str) -> int:
        """Queue the job's evaluation suites on its checkpoint `iteration` at `path`; how many were queued."""
        return 0

    def pending_evaluations(self, job_id: int) -> int:
        """The job's evaluations queued or running."""
        return 0

    def checkpoint_metric(self, job_id: int, metric: str) -> dict[int, float | None]:
        """Each recorded checkpoint's value of `metric` ("<suite>/<stat>"); None: not scored yet."""
        return {}


_TRANSITIONS = {  # the subset of the control plane's state machine the runtime asks for
    JobStatus.queued: {JobStatus.starting, JobStatus.running, JobStatus.failed, JobStatus.cancelled},
    JobStatus.starting: {JobStatus.running, JobStatus.failed, JobStatus.cancelled},
    JobStatus.running: {JobStatus.paused, JobStatus.parked, JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled},
    JobStatus.parked: {JobStatus.queued, JobStatus.failed, JobStatus.cancelled},
    JobStatus.paused: {JobStatus.running, JobStatus.failed, JobStatus.cancelled},
}


@dataclass
class MemoryReporter(Reporter):
    """Everything in memory: train-local's record of a run, and the test double of the runtime's seam."""

    jobs: dict[int, JobRecord] = field(default_factory=dict)
    statuses: dict[int, JobStatus] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    iterations: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    samples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    checkpoints: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    spans: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    instances: dict[int, dict[str, InstanceStatus]] = field(default_factory=dict)
    instance_errors: dict[int, dict[str, str]] = field(default_factory=dict)  # the error a dead instance died of
    ptl: dict[int, list[list[float]]] = field(default_factory=dict)
    driver_beats: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_job(self, record: JobRecord) -> None:
        self.jobs[record.job_id] = record
        self.statuses[record.job_id] = record.status

    def load_job(self, job_id: int) -> JobRecord | None:
        return self.jobs.get(job_id)

    def job_status(self, job_id: int) -> JobStatus | None:
        return self.statuses.get(job_id)

    def driver_epoch(self, job_id: int) -> int | None:
        record = self.jobs.get(job_id)
        return record.epoch if record is not None else None

    def instance_states(self, job_id: int) -> dict[str, InstanceStatus]:
        return dict(self.instances.get(job_id, {}))

    def load_ptl(self, job_id: int) -> list[list[float]] | None:
        return self.ptl.get(job_id)

    def set_job_status(self, job_id: int, to: JobStatus, error: str | None = None) -> None:
        with self.lock:
            current = self.statuses.get(job_id)
            if current is None or current in TERMINAL_JOB_STATUSES or to not in _TRANSITIONS.get(current, set()):
                return
            self.statuses[job_id] = to
            if error is not None:
                self.errors[job_id] = error

    def record_iteration(self, job_id: int, iteration: int, metrics: dict[str, Any],
                         samples: list[dict[str, Any]]) -> None:
        with self.lock:
            self.iterations.setdefault(job_id, {})[iteration] = dict(metrics)
            self.samples.setdefault(job_id, []).extend(samples)

    def record_checkpoint(self, job_id: int, iteration: int, path: str) -> None:
        self.checkpoints.setdefault(job_id, []).append((iteration, path))

    def record_event(self, job_id: int, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        self.events.setdefault(job_id, []).append({"kind": kind, "message": message, "data": data or {}})

    def record_spans(self, job_id: int, spans: list[dict[str, Any]]) -> None:
        with self.lock:
            self.spans.setdefault(job_id, []).extend(spans)

    def save_ptl(self, job_id: int, points: list[list[float]]) -> None:
        self.ptl[job_id] = points

    def beat_driver(self, job_id: int) -> None:
        self.driver_beats[job_id] = time.time()

    def claim_instance(self, job_id: int, instance_id: str) -> bool:
        return self.instances.get(job_id, {}).get(instance_id) in LIVE_INSTANCE_STATUSES

    def beat_instance(self, job_id: int, instance_id: str, host: str) -> bool:
        return self.claim_instance(job_id, instance_id)

    def set_instance_status(self, job_id: int, instance_id: str, status: InstanceStatus,
                            error: str | None = None) -> None:
        with self.lock:
            rows = self.instances.setdefault(job_id, {})
            if rows.get(instance_id) != InstanceStatus.dead:
                rows[instance_id] = status
                if error is not None:
                    self.instance_errors.setdefault(job_id, {})[instance_id] = error
