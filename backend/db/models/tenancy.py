"""Teams, users, their memberships (roles) and API keys."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column, relationship

from backend.db.base import Base, created_at_column, enum_column
from backend.db.enums import Role


class Team(Base):
    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    max_concurrent_jobs: Mapped[int] = mapped_column(default=2)
    max_generation_instances: Mapped[int] = mapped_column(default=8)
    share: Mapped[float] = mapped_column(default=1.0, server_default="1")  # fair-share weight (backend/scheduler)
    max_priority: Mapped[str] = mapped_column(String(16), default="normal", server_default="normal")  # JobSpec.priority
    # device-hours (both pools) the team may use per calendar month (UTC); None: no budget (backend/services/budgets)
    max_device_hours_per_month: Mapped[float | None]
    hub_token_sealed: Mapped[str | None] = mapped_column(Text)  # the team's Hugging Face token, encrypted (secret_box)
    created_at: Mapped[datetime] = created_at_column()


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(400))  # None: cannot log in (API keys only)
    is_active: Mapped[bool] = mapped_column(default=True)
    is_platform_admin: Mapped[bool] = mapped_column(default=False, server_default=false())  # operator: device catalog
    sessions_valid_after: Mapped[datetime | None]  # session tokens issued before this are refused (password change)
    # made through POST /auth/register (not by the operator): STREAMRL_PLATFORM_ADMINS never names such an account
    self_registered: Mapped[bool] = mapped_column(default=False, server_default=false())
    last_team_id: Mapped[int | None]  # the team of the latest login / switch: a plain login lands there (if a member)
    created_at: Mapped[datetime] = created_at_column()


class Membership(Base):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("team_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[Role] = enum_column(Role)
    created_at: Mapped[datetime] = created_at_column()

    team: Mapped[Team] = relationship(lazy="joined")
    user: Mapped[User] = relationship(lazy="joined")


class InvitationStatus(StrEnum):
    pending = "pending"
    accepted = "accepted"
    declined = "declined"
    revoked = "revoked"


class Invitation(Base):
    """A team admin's offer of a role to an email. Making one attaches and creates nothing: only the account with
    that email (now or registered later) joins, by accepting it from its own session before `expires_at`."""

    __tablename__ = "team_invitations"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(320), index=True)  # normalized (lower case)
    role: Mapped[Role] = enum_column(Role)
    status: Mapped[InvitationStatus] = enum_column(InvitationStatus, default=InvitationStatus.pending)
    invited_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime]
    answered_at: Mapped[datetime | None]  # accepted, declined or revoked

    team: Mapped[Team] = relationship(lazy="joined")
    invited_by: Mapped[User | None] = relationship(lazy="joined")


class ApiKey(Base):
    """`tml-<prefix>_<secret>` (older keys: `srl_...`): the prefix is public and indexed, only a hash of the secret
    is stored."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    created_by_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(128))
    scopes: Mapped[list[str]]
    created_at: Mapped[datetime] = created_at_column()
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
