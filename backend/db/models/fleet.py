"""The running world the controller reconciles: worker processes and each job's generation instances."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column, enum_column
from backend.db.enums import InstanceStatus


class Worker(Base):
    __tablename__ = "workers"
    __table_args__ = (UniqueConstraint("pool", "hostname"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pool: Mapped[str] = mapped_column(String(32))  # generation | training
    hostname: Mapped[str] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime] = created_at_column()


class GenerationInstance(Base):
    __tablename__ = "generation_instances"
    __table_args__ = (UniqueConstraint("job_id", "instance_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    instance_id: Mapped[str] = mapped_column(String(100))
    status: Mapped[InstanceStatus] = enum_column(InstanceStatus, default=InstanceStatus.starting)
    celery_task_id: Mapped[str | None] = mapped_column(String(255))
    hostname: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None]
    started_at: Mapped[datetime] = created_at_column()
    stopped_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)  # why the instance's task failed (crash-loop detection)
