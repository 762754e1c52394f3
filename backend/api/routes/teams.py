"""The current team: quotas and members."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from backend.api.deps import AdminAuth, IdPath, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import team_public
from backend.db.models import Membership
from backend.schemas.auth import MemberCreate, MemberPublic, MemberUpdate, QuotasUpdate, TeamPublic
from backend.services import teams as team_service

router = APIRouter(prefix="/teams/current", tags=["teams"], responses=errors(*AUTHENTICATED))


def _member(membership: Membership) -> MemberPublic:
    return MemberPublic(user_id=membership.user_id, email=membership.user.email, role=membership.role)


@router.get("")
def current_team(auth: ViewerAuth) -> TeamPublic:
    """The caller's current team and its quotas."""
    return team_public(auth.team, auth.role)


@router.patch("/quotas")
def update_quotas(body: QuotasUpdate, auth: AdminAuth, session: SessionDep) -> TeamPublic:
    """Change the team's quotas (admin)."""
    team = team_service.update_quotas(
        session=session,
        team=auth.team,
        max_concurrent_jobs=body.max_concurrent_jobs,
        max_generation_instances=body.max_generation_instances,
    )
    session.commit()
    return team_public(team, auth.role)


@router.get("/members")
def list_members(auth: ViewerAuth, session: SessionDep) -> list[MemberPublic]:
    """Members of the team with their roles."""
    return [_member(m) for m in team_service.list_members(session=session, team=auth.team)]


@router.post("/members", status_code=status.HTTP_201_CREATED, responses=errors(409))
def add_member(body: MemberCreate, auth: AdminAuth, session: SessionDep) -> MemberPublic:
    """Add a member (admin); a new email creates the user."""
    membership = team_service.add_member(
        session=session, team=auth.team, actor_role=auth.role, email=body.email, role=body.role, password=body.password
    )
    session.commit()
    return _member(membership)


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
