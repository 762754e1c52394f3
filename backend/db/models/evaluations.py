"""Evaluations: one suite run on one model (a registered model or a job checkpoint); services/evaluations.py."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column


class Evaluation(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    iteration: Mapped[int | None]  # the job's checkpoint; None: a registered model
    model: Mapped[str] = mapped_column(String(400))  # what was asked for: a model name or job:<id>@<iteration>
    model_dir: Mapped[str] = mapped_column(String(1000))
    suite_name: Mapped[str] = mapped_column(String(64))
    suite: Mapped[dict[str, Any]]  # EvalSuiteSpec as JSON
    dataset_path: Mapped[str | None] = mapped_column(String(1000))
    seed: Mapped[int] = mapped_column(default=0)
    generation: Mapped[dict[str, Any] | None]  # the job's GenerationSpec as JSON (engine settings)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued | running | succeeded | failed
    error: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any] | None]  # {mean, pass@1, pass@k, k, prompts, samples}
    rows: Mapped[dict[str, Any] | None]  # {"rows": [{prompt, answer, outputs, scores}], "truncated": n}
    created_at: Mapped[datetime] = created_at_column()
    finished_at: Mapped[datetime | None]
