"""Schemas for users, teams, members, sessions and API keys."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from backend.db.enums import Role
from backend.schemas.common import MAX_ID, ORMModel, RequestModel, UtcDatetime
from contract.scheduling import PRIORITIES, Priority
from contract.spec_base import choice_list

PASSWORD_RULE = "10-200 characters, 5+ distinct, not a common password, not containing the email's name"


class RegisterRequest(RequestModel):
    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=10, max_length=200, description=PASSWORD_RULE)
    team_name: str = Field(min_length=1, max_length=200)


class LoginRequest(RequestModel):
    email: str = Field(min_length=3, max_length=320)
    password: str = Field(min_length=1, max_length=200)
    team_id: int | None = Field(None, ge=1, le=MAX_ID)


class PasswordChange(RequestModel):
    current_password: str = Field(min_length=1, max_length=200)
    new_password: str = Field(min_length=10, max_length=200, description=PASSWORD_RULE)


class SwitchTeamRequest(RequestModel):
    team_id: int = Field(ge=1, le=MAX_ID)


class UserPublic(ORMModel):
    id: int
    email: str
    created_at: UtcDatetime


class Quotas(BaseModel):
    max_concurrent_jobs: int = Field(ge=0, le=10_000)
    max_generation_instances: int = Field(ge=0, le=100_000)
    max_device_hours_per_month: float | None = Field(None, ge=0, description="device-hours (both pools) per calendar "
                                                      "month (UTC); null: no budget")
    share: float = Field(1.0, description="fair-share weight: the scheduler splits contended slots in proportion")
    max_priority: Priority = Field("normal", description="the highest JobSpec.priority the team's jobs may ask for")


class QuotasUpdate(RequestModel):
    max_concurrent_jobs: int | None = Field(None, ge=0, le=10_000)
    max_generation_instances: int | None = Field(None, ge=0, le=100_000)
    max_device_hours_per_month: float | None = Field(None, ge=0, le=1e9, description="the team's monthly budget of "
                                                      "device-hours; an explicit null removes it")
    share: float | None = Field(None, gt=0, le=1000, description="fair-share weight (default 1)")
    max_priority: Priority | None = Field(None, json_schema_extra=choice_list(PRIORITIES),
                                          description="the highest JobSpec.priority the team's jobs may ask for")


class TeamPublic(BaseModel):
    id: int
    name: str
    quotas: Quotas
    role: Role | None = None  # the caller's role in it, where known


class RegisterResponse(BaseModel):
    """The same answer whether or not the email already had an account (no account enumeration)."""

    email: str
    team_name: str
    detail: str = "registration received: log in with this email and password"


class SessionResponse(BaseModel):
    token: str
    user: UserPublic
    team: TeamPublic
    teams: list[TeamPublic]


class MeResponse(BaseModel):
    user: UserPublic
    team: TeamPublic
    role: Role
    teams: list[TeamPublic]
    auth: str  # "session" | "api_key"
    platform_admin: bool = False  # an operator: may change the device catalog


class MemberPublic(BaseModel):
    user_id: int
    email: str
    role: Role


class InvitationCreate(RequestModel):
    """An invitation of an email to the current team; nothing is attached or created until its account accepts."""

    email: str = Field(min_length=3, max_length=320)
    role: Role = Role.member
    password: str | None = Field(
        None, max_length=200, description="not accepted: the invited person sets their own password when registering"
    )

    @field_validator("password")
    @classmethod
    def _no_password(cls, value: str | None) -> None:
        if value is not None:
            raise ValueError("an invitation carries no password: the invited person registers with their own")
        return None


class InvitationPublic(BaseModel):
    """An invitation as its team sees it; the same fields whether or not the email has an account."""

    id: int
    email: str
    role: Role
    status: str  # pending | expired | accepted | declined | revoked
    invited_by: str | None  # the sender's email
    created_at: UtcDatetime
    expires_at: UtcDatetime


class InvitationReceived(BaseModel):
    """An invitation as the invited account sees it (GET /auth/invitations)."""

    id: int
    team_id: int
    team_name: str
    role: Role
    status: str
    invited_by: str | None
    created_at: UtcDatetime
    expires_at: UtcDatetime


class MemberUpdate(RequestModel):
    role: Role


class ApiKeyCreate(RequestModel):
    name: str = Field(min_length=1, max_length=200)
    scopes: list[str] | None = Field(None, description="subset of read, write, admin (default read+write)")


class ApiKeyPublic(ORMModel):
    id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None
    revoked_at: UtcDatetime | None


class ApiKeyCreated(ApiKeyPublic):
    secret: str  # the full token `tml-<prefix>_<secret>`; shown once
