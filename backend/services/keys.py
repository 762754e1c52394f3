"""API keys of a team: list, create (secret shown once), revoke (refused from the next request on)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.models import ApiKey, Team, User
from backend.services.auth import DEFAULT_SCOPES, SCOPE_ROLES, new_api_key
from backend.services.errors import InvalidInput, not_found


def list_keys(*, session: Session, team: Team) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).where(ApiKey.team_id == team.id).order_by(ApiKey.id)))


def create_key(
    *, session: Session, team: Team, creator: User, name: str, scopes: list[str] | None
) -> tuple[ApiKey, str]:
    scopes = DEFAULT_SCOPES if scopes is None else scopes
    unknown = sorted(set(scopes) - set(SCOPE_ROLES))
    if unknown or not scopes:
        raise InvalidInput(f"scopes must be a non-empty subset of {sorted(SCOPE_ROLES)}", loc=("body", "scopes"))
    return new_api_key(session=session, team=team, creator=creator, name=name, scopes=scopes)


def revoke_key(*, session: Session, team: Team, key_id: int) -> ApiKey:
    key = session.scalar(select(ApiKey).where(ApiKey.id == key_id, ApiKey.team_id == team.id))
    if key is None:
        raise not_found("API key", key_id)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    session.flush()
    return key
