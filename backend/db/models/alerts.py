"""A team's notification rules and their deliveries.

A delivery is a row with a state, written in the same transaction as the job event that caused it: the controller's
watch loop (backend/controller/watch.py) sends pending rows off the request path, so a delivery pending when a process
died is sent after the restart. Secrets are stored encrypted (backend/services/secret_box.py), never returned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column, utcnow


class AlertRule(Base):
    __tablename__ = "alert_rules"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    events: Mapped[list[str]]  # contract.events.ALERT_EVENTS
    channel: Mapped[str] = mapped_column(String(16))  # webhook | email
    url: Mapped[str | None] = mapped_column(String(2000))  # webhook
    recipients: Mapped[list[str]] = mapped_column(JSON, default=list)  # email
    secret_encrypted: Mapped[str | None] = mapped_column(Text)  # webhook HMAC key (Fernet token)
    enabled: Mapped[bool] = mapped_column(default=True)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class AlertDelivery(Base):
    """One notification of one rule: `pending` until sent (`succeeded`) or out of attempts (`failed`)."""

    __tablename__ = "alert_deliveries"
    __table_args__ = (
        UniqueConstraint("rule_id", "event_id"),
        Index("ix_alert_deliveries_state_next_attempt_at", "state", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    rule_id: Mapped[int] = mapped_column(ForeignKey("alert_rules.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    event_id: Mapped[int | None] = mapped_column(ForeignKey("job_events.id", ondelete="CASCADE"))  # None: a test
    event: Mapped[str] = mapped_column(String(32))  # job_failed | ... | test
    payload: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending | succeeded | failed
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)  # also the lease of an attempt in progress
    last_status_code: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    log: Mapped[list[Any]] = mapped_column(JSON, default=list)  # [{at, status_code, error, ms}] per attempt
    created_at: Mapped[datetime] = created_at_column()
    finished_at: Mapped[datetime | None]
