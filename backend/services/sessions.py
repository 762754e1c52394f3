"""Session lifecycle beyond the token itself: logout, password change and strength, login throttling, operators.

Throttle: failed password checks are rows in `login_failures`, keyed per account and per client address; when
either key has `limit` failures inside the window, further attempts answer 429 with Retry-After = seconds until the
oldest of them leaves the window (the check runs before the password is verified, so guessing stops too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.models import LoginFailure, RevokedSession, User
from backend.services.auth import AuthContext, as_utc, hash_password, verify_password
from backend.services.errors import InvalidInput, TooManyRequests

MIN_PASSWORD_CHARS, MIN_DISTINCT_CHARS = 10, 5
COMMON_PASSWORDS = frozenset({
    "password", "password1", "password12", "password123", "passw0rd", "1234567890", "0123456789", "12345678910",
    "qwertyuiop", "1q2w3e4r5t", "qwerty1234", "iloveyou12", "letmein123", "welcome123", "administrator",
    "changeme123", "streamrl123", "abcdefghij", "trustno1234",
})


def check_password_strength(password: str, *, email: str, loc: tuple[str, ...] = ("body", "password")) -> None:
    """The minimum rule: 10+ characters, 5+ distinct ones, not a common password, not containing the email's name."""
    lowered, local = password.lower(), email.strip().lower().partition("@")[0]
    if len(password) < MIN_PASSWORD_CHARS:
        raise InvalidInput(f"password must have at least {MIN_PASSWORD_CHARS} characters", loc=loc)
    if len(set(password)) < MIN_DISTINCT_CHARS:
        raise InvalidInput(f"password must use at least {MIN_DISTINCT_CHARS} different characters", loc=loc)
    if lowered in COMMON_PASSWORDS:
        raise InvalidInput("password is too common: choose another", loc=loc)
    if len(local) >= 4 and local in lowered:
        raise InvalidInput("password must not contain the email address's name", loc=loc)


@dataclass(frozen=True)
class Throttle:
    window_s: int
    per_account: int
    per_address: int

    def keys(self, email: str, address: str | None) -> list[tuple[str, int]]:
        keys = [(f"account:{email.strip().lower()[:320]}", self.per_account)]
        if address:
            keys.append((f"address:{address[:64]}", self.per_address))
        return keys

    def check(self, session: Session, *, email: str, address: str | None) -> None:
        """429 (with the wait in seconds) when the account or the address has too many recent failures."""
        since = utcnow() - timedelta(seconds=self.window_s)
        for key, limit in self.keys(email, address):
            recent = select(LoginFailure.created_at).where(LoginFailure.key == key, LoginFailure.created_at >= since)
            count = session.scalar(select(func.count()).select_from(recent.subquery())) or 0
            if count >= limit:
                oldest = session.scalar(
                    recent.order_by(LoginFailure.created_at.desc()).offset(limit - 1).limit(1)
                )
                wait = self.window_s - (utcnow() - as_utc(oldest or utcnow())).total_seconds()
                what = "this account" if key.startswith("account:") else "your address"
                raise TooManyRequests(
                    f"too many failed logins for {what}: try again in {math.ceil(max(wait, 1))} s",
                    retry_after_s=math.ceil(max(wait, 1)),
                )

    def record_failure(self, session: Session, *, email: str, address: str | None) -> None:
        """Count one failure under every key (committed by the caller even though the request fails)."""
        now = utcnow()
        session.execute(delete(LoginFailure).where(LoginFailure.created_at < now - timedelta(seconds=self.window_s)))
        session.add_all(LoginFailure(key=key, created_at=now) for key, _ in self.keys(email, address))
        session.flush()

    def clear_account(self, session: Session, *, email: str) -> None:
        key = self.keys(email, None)[0][0]
        session.execute(delete(LoginFailure).where(LoginFailure.key == key))


def revoke_session(session: Session, auth: AuthContext) -> None:
    """Logout: the presented session token is refused from now on (its id is kept until it would expire)."""
    assert auth.session_id is not None and auth.session_expires is not None
    now = utcnow()
    session.execute(delete(RevokedSession).where(RevokedSession.expires_at < now))
    if session.get(RevokedSession, auth.session_id) is None:
        expires = datetime.fromtimestamp(auth.session_expires, UTC)
        session.add(RevokedSession(jti=auth.session_id, user_id=auth.user.id, expires_at=expires, revoked_at=now))
    session.flush()


def end_all_sessions(session: Session, user: User) -> None:
    """Every session token of `user` issued until now is refused (API keys are not affected)."""
    user.sessions_valid_after = utcnow()
    session.flush()


def change_password(session: Session, user: User, *, current: str, new: str) -> None:
    """Set a new password after checking the current one; ends every existing session of the user."""
    if not verify_password(current, user.password_hash):
        raise InvalidInput("the current password is wrong", loc=("body", "current_password"))
    check_password_strength(new, email=user.email, loc=("body", "new_password"))
    if verify_password(new, user.password_hash):
        raise InvalidInput("the new password must differ from the current one", loc=("body", "new_password"))
    user.password_hash = hash_password(new)
    end_all_sessions(session, user)


def is_platform_admin(user: User, platform_admins: list[str]) -> bool:
    """An operator: flagged in the database (the first user ever) or listed in STREAMRL_PLATFORM_ADMINS."""
    return user.is_platform_admin or user.email in {email.strip().lower() for email in platform_admins}
