"""What the dashboard draws: a sample of finished generations and the pipeline timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column


class JobSample(Base):
    __tablename__ = "job_samples"
    __table_args__ = (
        UniqueConstraint("job_id", "sample_id"),
        Index("ix_job_samples_job_id_iteration", "job_id", "iteration"),
        Index("ix_job_samples_job_id_id", "job_id", "id"),  # the newest-first page reads `limit` rows, not the job's
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    iteration: Mapped[int]
    sample_id: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    response: Mapped[str] = mapped_column(Text)
    reward: Mapped[float]
    length: Mapped[int]  # response tokens
    policy_version: Mapped[int]
    instance_id: Mapped[str] = mapped_column(String(200), default="")
    reward_components: Mapped[dict[str, Any] | None]  # composite / dict rewards: name -> value
    reward_error: Mapped[str | None] = mapped_column(Text)  # why the reward failed for this sample
    truncated: Mapped[bool] = mapped_column(default=False, server_default=false())  # cut by max_tokens
    # a multi-turn episode: turns, conversation, loss-mask segments (workers/core/episode.py `episode_record`)
    episode: Mapped[dict[str, Any] | None]
    # the trajectory explorer (workers/training/trainer.py `token_trace`): per-token pieces, behaviour and trainer
    # logprobs, version marks, advantage, loss mask; and the sample's mismatch (mean k3 over its on-policy tokens)
    tokens: Mapped[dict[str, Any] | None]
    mismatch: Mapped[float | None]
    created_at: Mapped[datetime] = created_at_column()


class TimelineSpan(Base):
    """One bar of the pipeline chart: `lane` (e.g. `trainer`, `gen-0`) doing `kind` from `start` to `end` (epoch s)."""

    __tablename__ = "timeline_spans"
    __table_args__ = (Index("ix_timeline_spans_job_id_start", "job_id", "start"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    lane: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(32))  # generating | loading_weights | idle | training | waiting
    start: Mapped[float]
    end: Mapped[float]
