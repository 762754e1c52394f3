"""Team invitations: the only way an existing account joins a team.

Invariants:
- Inviting attaches and creates nothing, and answers the same whether or not the email has an account (no account
  enumeration, no caller-chosen passwords).
- Only the account whose email the invitation names joins, by accepting it from its own session, while it is pending,
  unexpired, and its sender may still grant its role in that team (a removed admin's invitations die with them).
- Only an owner may invite an owner (the rule of `teams.check_may_grant`).
- A team holds at most `MAX_OPEN_PER_TEAM` open invitations (nobody's list can be flooded from one team).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.enums import Role
from backend.db.models import Invitation, InvitationStatus, Membership, Team, User
from backend.services.auth import as_utc, hash_password
from backend.services.errors import Conflict, Forbidden, not_found
from backend.services.sessions import check_password_strength
from backend.services.teams import check_may_grant, create_user, normalize_email

MAX_OPEN_PER_TEAM = 200


def is_open(invitation: Invitation) -> bool:
    """Pending and not yet expired: the invited account may still accept or decline it."""
    return invitation.status == InvitationStatus.pending and as_utc(invitation.expires_at) > utcnow()


def shown_status(invitation: Invitation) -> str:
    """The status as shown: a pending invitation past its expiry is `expired`."""
    if invitation.status == InvitationStatus.pending and not is_open(invitation):
        return "expired"
    return invitation.status.value


def _member_with_email(session: Session, team: Team, email: str) -> bool:
    query = (select(func.count()).select_from(Membership).join(User, User.id == Membership.user_id)
             .where(Membership.team_id == team.id, User.email == email))
    return bool(session.scalar(query))


def invite(
    *, session: Session, team: Team, actor: User, actor_role: Role, email: str, role: Role, ttl_s: int
) -> Invitation:
    """Record (or renew: new role, sender and expiry) a pending invitation of `email` to `team` with `role`."""
    check_may_grant(actor_role, role)
    email = normalize_email(email)
    if _member_with_email(session, team, email):  # the team's own member list shows this already
        raise Conflict(f"{email} is already a member of this team")
    invitation = session.scalar(
        select(Invitation).where(Invitation.team_id == team.id, Invitation.email == email,
                                 Invitation.status == InvitationStatus.pending).order_by(Invitation.id.desc()).limit(1)
    )
    if invitation is None:
        open_count = session.scalar(select(func.count()).select_from(Invitation).where(
            Invitation.team_id == team.id, Invitation.status == InvitationStatus.pending,
            Invitation.expires_at > utcnow()))
        if (open_count or 0) >= MAX_OPEN_PER_TEAM:
            raise Conflict(f"the team already has {MAX_OPEN_PER_TEAM} open invitations: revoke some first")
        invitation = Invitation(team_id=team.id, email=email, status=InvitationStatus.pending)
        session.add(invitation)
    invitation.role, invitation.invited_by_id = role, actor.id
    invitation.expires_at = utcnow() + timedelta(seconds=ttl_s)
    session.flush()
    session.refresh(invitation)
    return invitation


def sent(*, session: Session, team: Team) -> list[Invitation]:
    """The team's pending invitations (expired ones included, until revoked or renewed), oldest first."""
    query = select(Invitation).where(Invitation.team_id == team.id, Invitation.status == InvitationStatus.pending)
    return list(session.scalars(query.order_by(Invitation.id)))


def revoke(*, session: Session, team: Team, invitation_id: int) -> Invitation:
    invitation = session.scalar(select(Invitation).where(Invitation.id == invitation_id, Invitation.team_id == team.id))
    if invitation is None:
        raise not_found("invitation", invitation_id)
    if invitation.status != InvitationStatus.pending:
        raise Conflict(f"invitation {invitation_id} was already {invitation.status.value}")
    invitation.status, invitation.answered_at = InvitationStatus.revoked, utcnow()
    session.flush()
    return invitation


def received(*, session: Session, user: User) -> list[Invitation]:
    """The open invitations addressed to the account's email, newest first."""
    query = select(Invitation).where(Invitation.email == user.email, Invitation.status == InvitationStatus.pending,
                                     Invitation.expires_at > utcnow())
    return list(session.scalars(query.order_by(Invitation.id.desc())))


def _addressed_to(session: Session, user: User, invitation_id: int) -> Invitation:
    """One invitation to this account; any other answers 404 (it does not say whom it was for)."""
    invitation = session.scalar(select(Invitation).where(Invitation.id == invitation_id,
                                                         Invitation.email == user.email))
    if invitation is None:
        raise not_found("invitation", invitation_id)
    if invitation.status != InvitationStatus.pending:
        raise Conflict(f"invitation {invitation_id} was already {invitation.status.value}")
    if not is_open(invitation):
        raise Conflict(f"invitation {invitation_id} has expired: ask the team for a new one")
    return invitation


def _sender_may_still_grant(session: Session, invitation: Invitation) -> bool:
    if invitation.invited_by_id is None:
        return False
    sender = session.scalar(select(Membership).where(Membership.team_id == invitation.team_id,
                                                     Membership.user_id == invitation.invited_by_id))
    if sender is None or not sender.role.at_least(Role.admin):
        return False
    return invitation.role != Role.owner or sender.role == Role.owner


def _join(session: Session, user: User, invitation: Invitation) -> None:
    if not _sender_may_still_grant(session, invitation):
        raise Conflict(f"invitation {invitation.id} is no longer valid (its sender may no longer grant "
                       f"{invitation.role.value}): ask the team for a new one")
    already = session.scalar(select(Membership).where(Membership.team_id == invitation.team_id,
                                                      Membership.user_id == user.id))
    if already is None:  # a member already (added by the operator) keeps the role it has
        session.add(Membership(team_id=invitation.team_id, user_id=user.id, role=invitation.role))
    invitation.status, invitation.answered_at = InvitationStatus.accepted, utcnow()


def accept(*, session: Session, user: User, invitation_id: int) -> Invitation:
    """The invited account joins the team with the invitation's role."""
    invitation = _addressed_to(session, user, invitation_id)
    _join(session, user, invitation)
    session.flush()
    return invitation


def decline(*, session: Session, user: User, invitation_id: int) -> Invitation:
    invitation = _addressed_to(session, user, invitation_id)
    invitation.status, invitation.answered_at = InvitationStatus.declined, utcnow()
    session.flush()
    return invitation


def register_invited(*, session: Session, email: str, password: str) -> None:
    """`POST /auth/register` while open registration is off: only an email with an open invitation may register; the
    new account (no team of its own) joins the teams that invited it, registering being its answer. A registered
    email answers the same and nothing changes (its owner logs in and accepts)."""
    email = normalize_email(email)
    check_password_strength(password, email=email)
    invitations = list(session.scalars(select(Invitation).where(
        Invitation.email == email, Invitation.status == InvitationStatus.pending, Invitation.expires_at > utcnow())))
    if not invitations:
        raise Forbidden("registration is disabled on this server: ask a team admin to invite this email, then "
                        "register with it")
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        hash_password(password)  # a new account costs one hash: so does this answer
        return
    user = create_user(session=session, email=email, password=password)
    user.self_registered = True
    joined = False
    for invitation in invitations:
        if _sender_may_still_grant(session, invitation):
            _join(session, user, invitation)
            joined = True
    if not joined:
        raise Conflict("the invitations of this email are no longer valid: ask the team for a new one")
    session.flush()
