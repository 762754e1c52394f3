"""The current team: quotas, members and the invitations it sent (the only way anyone joins it)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.orm import Session

from backend.api.deps import AdminAuth, IdPath, PlatformAdminAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import team_public
from backend.db.enums import Role
from backend.db.models import Invitation, Membership, Team
from backend.schemas.auth import (
    InvitationCreate,
    InvitationPublic,
    MemberPublic,
    MemberUpdate,
    QuotasUpdate,
    TeamPublic,
)
from backend.services import invitations
from backend.services import teams as team_service
from backend.services.errors import Forbidden, not_found
from backend.services.sessions import is_platform_admin

router = APIRouter(prefix="/teams/current", tags=["teams"], responses=errors(*AUTHENTICATED))
operator_router = APIRouter(prefix="/teams", tags=["teams"], responses=errors(*AUTHENTICATED))


def _member(membership: Membership) -> MemberPublic:
    return MemberPublic(user_id=membership.user_id, email=membership.user.email, role=membership.role)


@router.get("")
def current_team(auth: ViewerAuth) -> TeamPublic:
    """The caller's current team and its quotas."""
    return team_public(auth.team, auth.role)


@router.patch("/quotas")
def update_quotas(body: QuotasUpdate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> TeamPublic:
    """Change the team's quotas (admin; `share` and `max_priority` only a platform admin: they rank the team among
    teams); jobs paused by `max_device_hours_per_month` resume once it has room."""
    ranking = sorted({"share", "max_priority"} & body.model_fields_set)
    if ranking and not is_platform_admin(auth.user, settings.platform_admins):
        raise Forbidden(f"{' and '.join(ranking)} rank the team among teams: only a platform admin (operator) may "
                        "change them (PATCH /teams/{id}/quotas)")
    return _apply_quotas(body, auth.team, session, auth.role)


def _apply_quotas(body: QuotasUpdate, team: Team, session: Session, role: Role | None) -> TeamPublic:
    team = team_service.update_quotas(
        session=session,
        team=team,
        max_concurrent_jobs=body.max_concurrent_jobs,
        max_generation_instances=body.max_generation_instances,
        share=body.share,
        max_priority=body.max_priority,
    )
    if "max_device_hours_per_month" in body.model_fields_set:  # null removes the budget; its paused jobs resume
        team.max_device_hours_per_month = body.max_device_hours_per_month
    session.commit()
    return team_public(team, role)


@operator_router.patch("/{team_id}/quotas")
def update_team_quotas(team_id: IdPath, body: QuotasUpdate, auth: PlatformAdminAuth,
                       session: SessionDep) -> TeamPublic:
    """Change any team's quotas, `share` and `max_priority` included (platform admin)."""
    team = session.get(Team, team_id)
    if team is None:
        raise not_found("team", team_id)
    return _apply_quotas(body, team, session, None)


@router.get("/members")
def list_members(auth: ViewerAuth, session: SessionDep) -> list[MemberPublic]:
    """Members of the team with their roles."""
    return [_member(m) for m in team_service.list_members(session=session, team=auth.team)]


def _invitation(invitation: Invitation) -> InvitationPublic:
    sender = invitation.invited_by
    return InvitationPublic(
        id=invitation.id, email=invitation.email, role=invitation.role, status=invitations.shown_status(invitation),
        invited_by=sender.email if sender is not None else None, created_at=invitation.created_at,
        expires_at=invitation.expires_at,
    )


def _invite(body: InvitationCreate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> InvitationPublic:
    invitation = invitations.invite(
        session=session, team=auth.team, actor=auth.user, actor_role=auth.role, email=body.email, role=body.role,
        ttl_s=settings.invitation_ttl_s,
    )
    session.commit()
    return _invitation(invitation)


@router.post("/invitations", status_code=status.HTTP_201_CREATED, responses=errors(409))
def invite(body: InvitationCreate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> InvitationPublic:
    """Invite an email to the team with a role (admin; only an owner invites an owner). Nothing is attached or created:
    the account with that email, now or once registered, joins by accepting from its own session
    (`POST /auth/invitations/{id}/accept`) before the invitation expires. The answer is the same whether or not the
    email has an account; inviting a pending email again renews it. 409 if the email is already a member."""
    return _invite(body, auth, session, settings)


@router.post("/members", status_code=status.HTTP_201_CREATED, responses=errors(409))
def add_member(body: InvitationCreate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> InvitationPublic:
    """Same as `POST /teams/current/invitations` (kept for older clients): nobody is added until they accept."""
    return _invite(body, auth, session, settings)


@router.get("/invitations")
def list_invitations(auth: ViewerAuth, session: SessionDep) -> list[InvitationPublic]:
    """The team's pending invitations (an unanswered one past its expiry shows `expired`)."""
    return [_invitation(i) for i in invitations.sent(session=session, team=auth.team)]


@router.delete("/invitations/{invitation_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(409))
def revoke_invitation(invitation_id: IdPath, auth: AdminAuth, session: SessionDep) -> Response:
    """Revoke a pending invitation (admin): it can no longer be accepted. 409 if it was already answered."""
    invitations.revoke(session=session, team=auth.team, invitation_id=invitation_id)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.patch("/members/{user_id}")
def change_role(
    user_id: IdPath, body: MemberUpdate, auth: AdminAuth, session: SessionDep
) -> MemberPublic:
    """Change a member's role (admin)."""
    membership = team_service.change_role(
        session=session, team=auth.team, actor_role=auth.role, user_id=user_id, role=body.role
    )
    session.commit()  # announced to every API process and live stream (backend/api/auth_cache.py)
    return _member(membership)


@router.delete("/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_member(user_id: IdPath, auth: AdminAuth, session: SessionDep) -> Response:
    """Remove a member (admin); their sessions, keys and open live streams stop working at once."""
    team_service.remove_member(session=session, team=auth.team, user_id=user_id)
    session.commit()  # announced to every API process and live stream
    return Response(status_code=status.HTTP_204_NO_CONTENT)


router.routes.extend(operator_router.routes)  # /teams/{id}/... beside /teams/current/... (main.py adds `router`)
