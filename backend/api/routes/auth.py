"""Sign-up, login (password -> session token), logout, password change, team switching, who-am-I, and the
invitations addressed to the caller (accept / decline)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy.orm import Session

from backend.api.deps import AuthDep, IdPath, SessionDep, SettingsDep
from backend.api.openapi import errors
from backend.api.presenters import team_public
from backend.db.models import Invitation, User
from backend.schemas.auth import (
    InvitationReceived,
    LoginRequest,
    MeResponse,
    PasswordChange,
    RegisterRequest,
    RegisterResponse,
    SessionResponse,
    SwitchTeamRequest,
    UserPublic,
)
from backend.services import invitations, sessions
from backend.services import teams as team_service
from backend.services.auth import authenticate_password, issue_session_token
from backend.services.errors import Forbidden, InvalidInput, Unauthorized
from contract.settings import Settings

router = APIRouter(prefix="/auth", tags=["auth"])


def _throttle(settings: Settings) -> sessions.Throttle:
    return sessions.Throttle(
        window_s=settings.login_window_s,
        free_failures=settings.login_free_failures,
        max_delay_s=settings.login_max_delay_s,
        base_delay_s=settings.login_base_delay_s,
        per_address=settings.login_max_failures_per_address,
        address_max_delay_s=settings.login_address_max_delay_s,
    )


def _client_address(request: Request) -> str | None:
    return request.client.host if request.client else None


def _session_response(session: Session, settings: Settings, user: User, team_id: int | None) -> SessionResponse:
    """A token for `team_id` (403 unless a member), or for the default team (`teams.default_team_id`): the team used
    last, else the account's first. The chosen team becomes the one used last."""
    memberships = team_service.teams_of(session=session, user=user)
    if not memberships:
        raise Forbidden(f"{user.email} belongs to no team")
    wanted = team_id if team_id else team_service.default_team_id(session=session, user=user)
    chosen = next(((t, r) for t, r in memberships if t.id == wanted), None)
    if chosen is None:
        raise Forbidden(f"{user.email} is not a member of team {team_id}")
    team, role = chosen
    if user.last_team_id != team.id:
        user.last_team_id = team.id  # committed by the caller
    token = issue_session_token(
        user_id=user.id, team_id=team.id, secret_key=settings.secret_key, ttl_s=settings.session_ttl_s
    )
    return SessionResponse(
        token=token,
        user=UserPublic.model_validate(user),
        team=team_public(team, role),
        teams=[team_public(t, r) for t, r in memberships],
    )


def _session_only(auth: AuthDep, action: str) -> None:
    if auth.api_key is not None:
        raise InvalidInput(f"an API key cannot {action}; log in with a password", loc=("header", "authorization"))


@router.post("/register", status_code=status.HTTP_201_CREATED, responses=errors(403, 409))
def register(body: RegisterRequest, session: SessionDep, settings: SettingsDep) -> RegisterResponse:
    """Create a user owning a new team, then log in. Passwords need 10+ characters, 5+ distinct ones, not a common
    password and not the email's name. The answer is the same whether or not the email already had an account (which
    is then left as it was): it never says which. With registration turned off, only an email holding an open team
    invitation may register: the account gets no team of its own and joins the inviting teams (403 otherwise)."""
    if settings.allow_registration:
        team_service.register_public(
            session=session, email=body.email, password=body.password, team_name=body.team_name
        )
    else:
        invitations.register_invited(session=session, email=body.email, password=body.password)
    session.commit()
    return RegisterResponse(email=body.email.strip().lower(), team_name=body.team_name)


@router.post("/login", responses=errors(401, 403, 429))
def login(body: LoginRequest, request: Request, session: SessionDep, settings: SettingsDep) -> SessionResponse:
    """Password login; the token carries the chosen team (default: the team used last, else the account's first).
    After failures from an address, its next attempts on that account wait longer each time, and after many failures
    from one address (any accounts) all its attempts wait a little (at most `STREAMRL_LOGIN_ADDRESS_MAX_DELAY_S`):
    429 with Retry-After. An address that has not failed is never slowed down."""
    throttle, address = _throttle(settings), _client_address(request)
    throttle.check(session, email=body.email, address=address)
    try:
        user = authenticate_password(session=session, email=body.email, password=body.password)
    except Unauthorized:
        throttle.record_failure(session, email=body.email, address=address)
        session.commit()
        raise
    throttle.clear(session, email=body.email, address=address)
    answer = _session_response(session, settings, user, body.team_id)
    session.commit()
    return answer


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT, responses=errors(401))
def logout(
    auth: AuthDep,
    session: SessionDep,
    everywhere: Annotated[bool, Query(description="end every session of the caller, not just this one")] = False,
) -> Response:
    """End this session (its token is refused from now on, open live streams close); `everywhere` ends them all."""
    _session_only(auth, "log out (revoke it with DELETE /keys/{id})")
    if everywhere:
        sessions.end_all_sessions(session, auth.user)
    else:
        sessions.revoke_session(session, auth)
    session.commit()  # announced to every API process and live stream (backend/api/auth_cache.py)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/password", responses=errors(401, 403, 429))
def change_password(
    body: PasswordChange,
    auth: AuthDep,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
) -> SessionResponse:
    """Change the caller's password; every other session ends and the answer holds a fresh token."""
    _session_only(auth, "change a password")
    throttle, address = _throttle(settings), _client_address(request)
    throttle.check(session, email=auth.user.email, address=address)
    try:
        sessions.change_password(session, auth.user, current=body.current_password, new=body.new_password)
    except InvalidInput as exc:
        if exc.loc == ("body", "current_password"):
            throttle.record_failure(session, email=auth.user.email, address=address)
            session.commit()
        raise
    answer = _session_response(session, settings, auth.user, auth.team.id)
    session.commit()  # announced to every API process and live stream
    return answer


@router.post("/switch-team", responses=errors(401, 403))
def switch_team(body: SwitchTeamRequest, auth: AuthDep, session: SessionDep, settings: SettingsDep) -> SessionResponse:
    """A new session token for another team of the caller."""
    _session_only(auth, "switch teams (it belongs to one team)")
    answer = _session_response(session, settings, auth.user, body.team_id)
    session.commit()  # the team used last: a plain login lands there
    return answer


@router.get("/me", responses=errors(401))
def me(auth: AuthDep, session: SessionDep, settings: SettingsDep) -> MeResponse:
    """The caller, their current team and role, and all their teams."""
    return MeResponse(
        user=UserPublic.model_validate(auth.user),
        team=team_public(auth.team, auth.role),
        role=auth.role,
        teams=[team_public(t, r) for t, r in team_service.teams_of(session=session, user=auth.user)],
        auth="api_key" if auth.api_key is not None else "session",
        platform_admin=sessions.is_platform_admin(auth.user, settings.platform_admins),
    )


def _received(invitation: Invitation) -> InvitationReceived:
    sender = invitation.invited_by
    return InvitationReceived(
        id=invitation.id, team_id=invitation.team_id, team_name=invitation.team.name, role=invitation.role,
        status=invitations.shown_status(invitation), invited_by=sender.email if sender is not None else None,
        created_at=invitation.created_at, expires_at=invitation.expires_at,
    )


@router.get("/invitations", responses=errors(401))
def my_invitations(auth: AuthDep, session: SessionDep) -> list[InvitationReceived]:
    """The open team invitations addressed to the caller's email, newest first."""
    return [_received(i) for i in invitations.received(session=session, user=auth.user)]


@router.post("/invitations/{invitation_id}/accept", responses=errors(401, 404, 409, 422))
def accept_invitation(invitation_id: IdPath, auth: AuthDep, session: SessionDep) -> InvitationReceived:
    """Join the inviting team with the invitation's role (a password session only: an API key belongs to one team).
    404 unless it is addressed to the caller; 409 if answered, revoked, expired, or its sender may no longer grant
    the role. The new team is then in `GET /auth/me`'s teams; `POST /auth/switch-team` acts in it."""
    _session_only(auth, "accept an invitation")
    invitation = invitations.accept(session=session, user=auth.user, invitation_id=invitation_id)
    session.commit()
    return _received(invitation)


@router.post("/invitations/{invitation_id}/decline", responses=errors(401, 404, 409, 422))
def decline_invitation(invitation_id: IdPath, auth: AuthDep, session: SessionDep) -> InvitationReceived:
    """Decline an invitation addressed to the caller (a password session only)."""
    _session_only(auth, "decline an invitation")
    invitation = invitations.decline(session=session, user=auth.user, invitation_id=invitation_id)
    session.commit()
    return _received(invitation)
