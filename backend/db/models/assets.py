"""What a team brings to its jobs: uploaded datasets and registered models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column


class Dataset(Base):
    """A team's prompt rows, stored as validated JSONL at `storage_path`.

    `state`: `ready` (the file is there, `row_count` counts it), `downloading` (a Hub dataset being fetched and
    validated: no file yet) or `failed` (`error` says why; no file). Only a ready dataset can run a job."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    row_count: Mapped[int]
    checksum: Mapped[str] = mapped_column(String(64))  # sha256 hex of the stored file
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    storage_path: Mapped[str] = mapped_column(String(1000))
    state: Mapped[str] = mapped_column(String(20), default="ready", server_default="ready")
    error: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(20), default="upload", server_default="upload")  # |hub
    hub_id: Mapped[str | None] = mapped_column(String(200))
    revision: Mapped[str | None] = mapped_column(String(200))
    split: Mapped[str | None] = mapped_column(String(100))
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at_column()


class Model(Base):
    """A model directory a team's jobs may load; specs name models by `name`, never by raw path.

    `state`: `ready` (validated, `card` filled), `downloading` (a Hub download in progress, `progress` in bytes) or
    `failed` (`error` says why). Only a ready model can run a job (backend/services/jobs.py).

    Registering a name the team already has adds a `version` (1, 2, ...); a spec's name means its newest version
    when the job is submitted, and the job keeps that version (`Job.model_id`) for its whole life."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("team_id", "name", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(default=1, server_default="1")
    path: Mapped[str] = mapped_column(String(1000))
    state: Mapped[str] = mapped_column(String(20), default="ready", server_default="ready")
    error: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(20), default="directory", server_default="directory")  # |archive|hub
    hub_id: Mapped[str | None] = mapped_column(String(200))
    revision: Mapped[str | None] = mapped_column(String(200))
    card: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"done_bytes", "total_bytes"} while downloading
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at_column()
