"""Experiment trackers: a team's connection to each tracker service (secrets encrypted) and, per job and tracker, the
run the control plane mirrors the job to, with its cursor.

The iteration rows are the buffer: `sent_iteration` advances only after the tracker accepted them, so an outage
leaves them waiting and a recovery (or a restarted controller) sends them from there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column, utcnow


class TrackerCredential(Base):
    __tablename__ = "tracker_credentials"
    __table_args__ = (UniqueConstraint("team_id", "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))  # mlflow | wandb
    settings: Mapped[dict[str, Any]]  # shown: tracking_uri, username (mlflow); base_url, entity (wandb)
    secrets_encrypted: Mapped[str | None] = mapped_column(Text)  # Fernet token of {token, password, api_key}
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class TrackerRun(Base):
    __tablename__ = "tracker_runs"
    __table_args__ = (UniqueConstraint("job_id", "tracker"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    tracker: Mapped[str] = mapped_column(String(32))  # mlflow | wandb | tensorboard
    run_ref: Mapped[str | None] = mapped_column(String(200))  # the tracker's run id, once created
    sent_iteration: Mapped[int] = mapped_column(default=0)  # iterations up to this one were accepted
    finished: Mapped[bool] = mapped_column(default=False, index=True)  # the run is closed: nothing more to send
    down_since: Mapped[datetime | None]  # set while the tracker is unreachable (an event says so)
    retry_at: Mapped[datetime | None]  # while down: the next attempt
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()
