"""Sign-up, login (password -> session token), team switching and who-am-I."""

from __future__ import annotations

from fastapi import APIRouter, status
from sqlalchemy.orm import Session

from backend.api.deps import AuthDep, SessionDep, SettingsDep
from backend.api.presenters import team_public
from backend.db.models import User
from backend.schemas.auth import (
    LoginRequest,
    MeResponse,
    RegisterRequest,
    RegisterResponse,
    SessionResponse,
    SwitchTeamRequest,
    UserPublic,
)
from backend.services import teams as team_service
from backend.services.auth import authenticate_password, issue_session_token
from backend.services.errors import Forbidden, InvalidInput
from contract.settings import Settings

router = APIRouter(prefix="/auth", tags=["auth"])


def _session_response(session: Session, settings: Settings, user: User, team_id: int | None) -> SessionResponse:
    memberships = team_service.teams_of(session=session, user=user)
    if not memberships:
        raise Forbidden(f"{user.email} belongs to no team")
    chosen = next(((t, r) for t, r in memberships if t.id == team_id), None) if team_id else memberships[0]
    if chosen is None:
        raise Forbidden(f"{user.email} is not a member of team {team_id}")
    team, role = chosen
    token = issue_session_token(
        user_id=user.id, team_id=team.id, secret_key=settings.secret_key, ttl_s=settings.session_ttl_s
    )
    return SessionResponse(
        token=token,
        user=UserPublic.model_validate(user),
        team=team_public(team, role),
        teams=[team_public(t, r) for t, r in memberships],
    )


@router.post("/register", status_code=status.HTTP_201_CREATED)
def register(body: RegisterRequest, session: SessionDep, settings: SettingsDep) -> RegisterResponse:
    """Create a user owning a new team (unless the operator turned registration off)."""
    if not settings.allow_registration:
        raise Forbidden("registration is disabled on this server: ask a team admin to add you")
    user, team = team_service.register(
        session=session, email=body.email, password=body.password, team_name=body.team_name
    )
    session.commit()
    return RegisterResponse(user=UserPublic.model_validate(user), team=team_public(team, role=None))


@router.post("/login")
def login(body: LoginRequest, session: SessionDep, settings: SettingsDep) -> SessionResponse:
    """Password login; the token carries the chosen team (default: the first)."""
    user = authenticate_password(session=session, email=body.email, password=body.password)
    return _session_response(session, settings, user, body.team_id)


@router.post("/switch-team")
def switch_team(body: SwitchTeamRequest, auth: AuthDep, session: SessionDep, settings: SettingsDep) -> SessionResponse:
    """A new session token for another team of the caller."""
    if auth.api_key is not None:
        raise InvalidInput("an API key belongs to one team; log in to switch teams", loc=("header", "authorization"))
    return _session_response(session, settings, auth.user, body.team_id)


@router.get("/me")
def me(auth: AuthDep, session: SessionDep) -> MeResponse:
    """The caller, their current team and role, and all their teams."""
    return MeResponse(
        user=UserPublic.model_validate(auth.user),
        team=team_public(auth.team, auth.role),
        role=auth.role,
        teams=[team_public(t, r) for t, r in team_service.teams_of(session=session, user=auth.user)],
        auth="api_key" if auth.api_key is not None else "session",
    )
