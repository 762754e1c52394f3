"""Jobs and what they record as they run: typed events, per-iteration metrics and checkpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column, enum_column
from backend.db.enums import JobStatus


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_team_id_status", "team_id", "status"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    # the API key that submitted it (None: a session); its usage is reported under that key
    created_by_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"))
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]]  # JobSpec.model_dump(mode="json")
    status: Mapped[JobStatus] = enum_column(JobStatus, index=True)
    target_instances: Mapped[int]  # desired generation instances; the controller reconciles towards it
    autoscale: Mapped[bool] = mapped_column(default=False)
    ptl_profile: Mapped[dict[str, Any] | None]  # per-token latency by batch size, measured by the workers
    current_iteration: Mapped[int] = mapped_column(default=0)
    # every driver (re)start gets a new epoch: request/sample ids carry it, so a restarted driver never mistakes an
    # earlier driver's in-flight samples for its own; failures count the restarts that were not clean hand-backs
    driver_epoch: Mapped[int] = mapped_column(default=0, server_default="0")
    driver_failures: Mapped[int] = mapped_column(default=0, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)
    # the budget that paused it (`limits.max_device_seconds`, `max_device_hours_per_month`...): the controller
    # resumes it once that budget has room again; None: not paused by a budget
    paused_for: Mapped[str | None] = mapped_column(String(64))
    # the team's own labels and free text: sorted unique tags of TAG_PATTERN (no quotes, so the stored JSON text
    # holds `"tag"` exactly when the list does: services.job_notes filters on it in any dialect)
    tags: Mapped[list[str]] = mapped_column(default=list, server_default="[]")
    notes: Mapped[str] = mapped_column(Text, default="", server_default="")
    # a fork (POST /jobs/{id}/fork): the job and checkpoint iteration it starts from; None: not a fork
    parent_job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    parent_iteration: Mapped[int | None]
    # the registered model version the job loads (its spec names the model; the newest version at submission);
    # None: a job from before versions, or its model version was deleted after it ended
    model_id: Mapped[int | None] = mapped_column(ForeignKey("models.id", ondelete="SET NULL"), index=True)
    created_at: Mapped[datetime] = created_at_column()
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class JobEvent(Base):
    """Typed log line of a job (kind e.g. `status`, `scale`, `created`, `worker`, `error`)."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)  # polling after an id reads only what is new

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = created_at_column()


class Iteration(Base):
    __tablename__ = "iterations"
    __table_args__ = (UniqueConstraint("job_id", "iteration"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    iteration: Mapped[int]
    metrics: Mapped[dict[str, Any]]  # flat; keys in docs/api.md
    created_at: Mapped[datetime] = created_at_column()


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "iteration"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    iteration: Mapped[int]
    path: Mapped[str] = mapped_column(String(1000))
    created_at: Mapped[datetime] = created_at_column()
    # evaluation suites' summaries: suite name -> {mean, pass@1, pass@k, ...} (backend/services/evaluations.py)
    scores: Mapped[dict[str, Any]] = mapped_column(default=dict)
    best: Mapped[bool] = mapped_column(default=False)  # the job's highest by checkpoint.metric (select: best)
