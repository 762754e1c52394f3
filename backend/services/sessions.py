"""Session lifecycle beyond the token itself: logout, password change and strength, login throttling, operators.

Throttle: failed password checks are rows in `login_failures`, keyed per (account, client address) and per client
address; past a number of failures, each next attempt of the pair, or of the address, waits longer after the latest
failure (429 with Retry-After; the check runs before the password is verified, so guessing slows down too, and the
right password waits as long as a guess, no longer). See `Throttle`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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
    """Failed logins slow down the source that fails, and never lock anyone out.

    Per (account, address): the first `free_failures` failures in the window cost nothing; after that each attempt
    waits base_delay_s * 2**(n - free_failures) seconds after the latest failure (1, 2, 4, ... s by default, capped at
    `max_delay_s`), the right password included — from that address only. Per address (any accounts): from
    `per_address` failures in the window on, each attempt waits base_delay_s * 2**(n - per_address) seconds after the
    address's latest failure, capped at `address_max_delay_s` (short: others on a shared address, e.g. behind one NAT,
    wait at most that long for their own right password, however many failures their neighbours made). An address
    that has not failed is never slowed down."""

    window_s: int
    free_failures: int
    max_delay_s: int
    base_delay_s: float
    per_address: int
    address_max_delay_s: int

    @staticmethod
    def _pair_key(email: str, address: str | None) -> str:
        return f"pair:{(address or 'unknown')[:64]}|{email.strip().lower()[:320]}"

    @staticmethod
    def _address_key(address: str | None) -> str:
        return f"address:{(address or 'unknown')[:64]}"

    def _recent(self, key: str) -> Any:
        since = utcnow() - timedelta(seconds=self.window_s)
        return select(LoginFailure.created_at).where(LoginFailure.key == key, LoginFailure.created_at >= since)

    def check(self, session: Session, *, email: str, address: str | None) -> None:
        """429 (with the wait in seconds) while this address must wait before its next attempt: on any account (its
        failures overall), or on this account (its failures on it)."""
        recent = self._recent(self._address_key(address))
        count = session.scalar(select(func.count()).select_from(recent.subquery())) or 0
        if count >= self.per_address:
            latest = session.scalar(recent.order_by(LoginFailure.created_at.desc()).limit(1))
            delay = min(self.base_delay_s * 2.0 ** min(count - self.per_address, 60), float(self.address_max_delay_s))
            wait = delay - (utcnow() - as_utc(latest or utcnow())).total_seconds()
            if wait > 0:
                raise _too_many("your address", wait)
        pair = self._recent(self._pair_key(email, address))
        failures = session.scalar(select(func.count()).select_from(pair.subquery())) or 0
        if failures < self.free_failures:
            return
        latest = session.scalar(pair.order_by(LoginFailure.created_at.desc()).limit(1))
        delay = min(self.base_delay_s * 2.0 ** min(failures - self.free_failures, 60), float(self.max_delay_s))
        wait = delay - (utcnow() - as_utc(latest or utcnow())).total_seconds()
        if wait > 0:
            raise _too_many("this account from your address", wait)

    def record_failure(self, session: Session, *, email: str, address: str | None) -> None:
        """Count one failure for the (account, address) pair and the address (committed by the caller even though
        the request fails)."""
        now = utcnow()
        session.execute(delete(LoginFailure).where(LoginFailure.created_at < now - timedelta(seconds=self.window_s)))
        session.add_all(LoginFailure(key=key, created_at=now)
                        for key in (self._pair_key(email, address), self._address_key(address)))
        session.flush()

    def clear(self, session: Session, *, email: str, address: str | None) -> None:
        """A correct password from this address: its failures on this account are forgotten."""
        session.execute(delete(LoginFailure).where(LoginFailure.key == self._pair_key(email, address)))


def _too_many(what: str, wait_s: float) -> TooManyRequests:
    seconds = math.ceil(max(wait_s, 1))
    return TooManyRequests(f"too many failed logins for {what}: try again in {seconds} s", retry_after_s=seconds)


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
    """An operator: flagged in the database (the first user ever), or listed in STREAMRL_PLATFORM_ADMINS and not
    self-registered. The list names accounts the operator made (`streamrl init-admin --direct`, `streamrl up`'s owner):
    whoever registers a listed email through POST /auth/register first gains nothing by it."""
    if user.is_platform_admin:
        return True
    return not user.self_registered and user.email in {email.strip().lower() for email in platform_admins}
