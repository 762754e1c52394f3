"""Teams, members (roles) and quotas. Joining a team is by invitation only (backend/services/invitations.py)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import Role
from backend.db.models import Membership, Team, User
from backend.services.auth import hash_password
from backend.services.errors import Conflict, Forbidden, InvalidInput, not_found
from backend.services.sessions import check_password_strength


def normalize_email(email: str) -> str:
    email = email.strip().lower()
    if "@" not in email or len(email) > 320:
        raise InvalidInput(f"not an email address: {email!r}", loc=("body", "email"))
    return email


def create_team(
    *, session: Session, name: str, max_concurrent_jobs: int = 2, max_generation_instances: int = 8
) -> Team:
    if session.scalar(select(Team.id).where(Team.name == name)) is not None:
        raise Conflict(f"team name {name!r} is taken")
    team = Team(name=name, max_concurrent_jobs=max_concurrent_jobs, max_generation_instances=max_generation_instances)
    session.add(team)
    session.flush()
    return team


def create_user(*, session: Session, email: str, password: str | None) -> User:
    email = normalize_email(email)
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        raise Conflict(f"email {email} is already registered")
    if password is not None:
        check_password_strength(password, email=email)
    user = User(email=email, password_hash=hash_password(password) if password else None)
    session.add(user)
    session.flush()
    return user


def register(*, session: Session, email: str, password: str, team_name: str) -> tuple[User, Team]:
    """Bootstrap: a new user owning a new team. The first user of the server is its platform (operator) admin."""
    first = session.scalar(select(func.count()).select_from(User)) == 0
    user = create_user(session=session, email=email, password=password)
    user.is_platform_admin = first
    team = create_team(session=session, name=team_name)
    session.add(Membership(team_id=team.id, user_id=user.id, role=Role.owner))
    session.flush()
    return user, team


def register_public(*, session: Session, email: str, password: str, team_name: str) -> None:
    """`POST /auth/register`: like `register`, but the outcome for a registered email is indistinguishable from a new
    one (no account enumeration): the same checks in the same order (password rule, team name), the same password
    hashing work, and nothing created. Only the team name, which the caller chose, can be reported taken."""
    email = normalize_email(email)
    check_password_strength(password, email=email)
    if session.scalar(select(Team.id).where(Team.name == team_name)) is not None:
        raise Conflict(f"team name {team_name!r} is taken")
    if session.scalar(select(User.id).where(User.email == email)) is not None:
        hash_password(password)  # a new account costs one hash: so does this answer
        return
    user, _ = register(session=session, email=email, password=password, team_name=team_name)
    user.self_registered = True  # STREAMRL_PLATFORM_ADMINS never names it (sessions.is_platform_admin)


def teams_of(*, session: Session, user: User) -> list[tuple[Team, Role]]:
    rows = session.execute(
        select(Team, Membership.role)
        .join(Membership, Membership.team_id == Team.id)
        .where(Membership.user_id == user.id)
        .order_by(Team.id)
    )
    return [(team, role) for team, role in rows]


def default_team_id(*, session: Session, user: User) -> int | None:
    """Where a login without `team_id` lands: the team of the account's latest login or switch (while still a member),
    else its first team (its oldest membership: the team it registered with, or the first invitation it accepted).
    Every membership is one the account accepted (or the operator made): never a team that attached it."""
    if user.last_team_id is not None and session.scalar(
        select(Membership.id).where(Membership.user_id == user.id, Membership.team_id == user.last_team_id)
    ):
        return user.last_team_id
    return session.scalar(select(Membership.team_id).where(Membership.user_id == user.id).order_by(Membership.id)
                          .limit(1))


def update_quotas(
    *, session: Session, team: Team, max_concurrent_jobs: int | None, max_generation_instances: int | None,
    share: float | None = None, max_priority: str | None = None,
) -> Team:
    if max_concurrent_jobs is not None:
        team.max_concurrent_jobs = max_concurrent_jobs
    if max_generation_instances is not None:
        team.max_generation_instances = max_generation_instances
    if share is not None:
        team.share = share
    if max_priority is not None:
        team.max_priority = max_priority
    session.flush()
    return team


def list_members(*, session: Session, team: Team) -> list[Membership]:
    return list(session.scalars(select(Membership).where(Membership.team_id == team.id).order_by(Membership.id)))


def get_member(*, session: Session, team: Team, user_id: int) -> Membership:
    membership = session.scalar(select(Membership).where(Membership.team_id == team.id, Membership.user_id == user_id))
    if membership is None:
        raise not_found("member", user_id)
    return membership


def check_may_grant(actor_role: Role, role: Role) -> None:
    if role == Role.owner and actor_role != Role.owner:
        raise Forbidden("only an owner can make someone an owner")


def change_role(*, session: Session, team: Team, actor_role: Role, user_id: int, role: Role) -> Membership:
    membership = get_member(session=session, team=team, user_id=user_id)
    if membership.role == Role.owner:
        raise Forbidden("the owner's role cannot be changed")
    check_may_grant(actor_role, role)
    membership.role = role
    session.flush()
    return membership


def remove_member(*, session: Session, team: Team, user_id: int) -> None:
    membership = get_member(session=session, team=team, user_id=user_id)
    if membership.role == Role.owner:
        raise Forbidden("the owner cannot be removed")
    session.delete(membership)
    session.flush()
