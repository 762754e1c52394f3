"""Session revocations and failed logins (the throttle's memory); both rows expire and are pruned on write."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column


class RevokedSession(Base):
    """A logged-out session token (by its id `jti`); kept until the token would have expired anyway."""

    __tablename__ = "revoked_sessions"

    jti: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    revoked_at: Mapped[datetime] = created_at_column()


class LoginFailure(Base):
    """One failed password check, counted under `key` = `account:<email>` and again under `address:<client ip>`."""

    __tablename__ = "login_failures"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(400), index=True)
    created_at: Mapped[datetime] = created_at_column(index=True)
