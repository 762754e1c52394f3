"""What each team, job and API key used: device-seconds and tokens, one row per recorded unit of work.

A job's iteration writes one row per pool (generation, training) in the transaction that records the iteration, keyed
by (job, iteration, pool): an iteration recorded again (a driver resumed from a checkpoint) replaces its rows, so a
job's usage is exactly its recorded iterations'. On-demand inference writes one row per call (no job, `iteration` None).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, utcnow


class UsageRecord(Base):
    __tablename__ = "usage_records"
    __table_args__ = (
        UniqueConstraint("job_id", "iteration", "pool"),
        Index("ix_usage_records_team_id_recorded_at", "team_id", "recorded_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    api_key_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id", ondelete="SET NULL"), index=True)
    pool: Mapped[str] = mapped_column(String(16))  # generation | training (contract.usage.POOLS)
    source: Mapped[str] = mapped_column(String(16))  # job | tinker | inference | evaluation
    iteration: Mapped[int | None]  # the job's iteration (1-based); None: an inference call
    device_seconds: Mapped[float] = mapped_column(default=0.0)
    tokens_generated: Mapped[int] = mapped_column(default=0)
    tokens_trained: Mapped[int] = mapped_column(default=0)
    recorded_at: Mapped[datetime] = mapped_column(default=utcnow)
