"""Passwords (scrypt), UI session tokens (HMAC-signed, carry user + team + expiry) and API keys (hashed secrets).

API key format: `tml-<prefix>_<secret>` (the `tml-` prefix the Tinker SDK requires, docs/tinker.md; keys made before
it, `srl_<prefix>_<secret>`, keep working); `prefix` (12 hex) is public and indexed, only sha256(secret) is stored.
Every resolution re-reads the membership (and the key); the API may answer reads from a per-process cache of
resolutions that every change through the API empties at once (backend/api/auth_cache.py). A session
token carries an id (`j`) and its issue time in ms (`i`): logout records the id in `revoked_sessions`, a password
change sets `users.sessions_valid_after`, and either refuses the token from the next request on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.enums import Role
from backend.db.models import ApiKey, Membership, RevokedSession, Team, User
from backend.services.errors import Unauthorized

SESSION_PREFIX = "sess_"
KEY_PREFIX = "tml-"
LEGACY_KEY_PREFIX = "srl_"
SCOPE_ROLES = {"read": Role.viewer, "write": Role.member, "admin": Role.admin}
DEFAULT_SCOPES = ["read", "write"]
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
MAX_TOKEN_CHARS = 4096


@dataclass(frozen=True)
class AuthContext:
    """Who is calling, for which team, with which effective role."""

    user: User
    team: Team
    role: Role
    api_key: ApiKey | None = None
    session_id: str | None = None  # the session token's `j` (None for API keys)
    session_expires: int | None = None  # epoch seconds


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **_SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


_DUMMY_HASH = hash_password(secrets.token_urlsafe(16))


def verify_password(password: str, stored: str | None) -> bool:
    if not stored or not stored.startswith("scrypt$"):
        return False
    _, salt_hex, digest_hex = stored.split("$")
    digest = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt_hex), dklen=32, **_SCRYPT)
    return hmac.compare_digest(digest.hex(), digest_hex)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_session_token(*, user_id: int, team_id: int, secret_key: str, ttl_s: int) -> str:
    now_ms = int(time.time() * 1000)
    claims = {"u": user_id, "t": team_id, "e": now_ms // 1000 + ttl_s, "i": now_ms, "j": secrets.token_hex(16)}
    payload = _b64(json.dumps(claims).encode())
    signature = _b64(hmac.new(secret_key.encode(), payload.encode(), hashlib.sha256).digest())
    return f"{SESSION_PREFIX}{payload}.{signature}"


@dataclass(frozen=True)
class SessionClaims:
    user_id: int
    team_id: int
    expires: int  # epoch seconds
    issued_ms: int
    jti: str


def _decode_session_token(token: str, secret_key: str) -> SessionClaims:
    try:
        payload, signature = token.removeprefix(SESSION_PREFIX).split(".")
        expected = _b64(hmac.new(secret_key.encode(), payload.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(signature, expected):
            raise ValueError("bad signature")
        raw = json.loads(_unb64(payload))
        claims = SessionClaims(int(raw["u"]), int(raw["t"]), int(raw["e"]), int(raw["i"]), str(raw["j"]))
    except (ValueError, TypeError, KeyError):
        raise Unauthorized("invalid session token") from None
    if claims.expires < time.time():
        raise Unauthorized("session expired: log in again")
    return claims


def membership_of(*, session: Session, user_id: int, team_id: int) -> Membership | None:
    return session.scalar(select(Membership).where(Membership.user_id == user_id, Membership.team_id == team_id))


def authenticate_password(*, session: Session, email: str, password: str) -> User:
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    stored = user.password_hash if user is not None else _DUMMY_HASH  # same work whether or not the email exists
    if not verify_password(password, stored) or user is None or not user.is_active:
        raise Unauthorized("wrong email or password")
    return user


def new_api_key(*, session: Session, team: Team, creator: User, name: str, scopes: list[str]) -> tuple[ApiKey, str]:
    """Create a key; returns it and the full secret token (shown once, never stored)."""
    prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    key = ApiKey(
        team_id=team.id,
        created_by_id=creator.id,
        name=name,
        prefix=prefix,
        secret_hash=hashlib.sha256(secret.encode()).hexdigest(),
        scopes=sorted(set(scopes)),
    )
    session.add(key)
    session.flush()
    return key, f"{KEY_PREFIX}{prefix}_{secret}"


def _key_role(scopes: list[str]) -> Role:
    roles = [SCOPE_ROLES[s] for s in scopes if s in SCOPE_ROLES]
    return max(roles, key=lambda r: r.rank, default=Role.viewer)


def _authenticate_api_key(session: Session, token: str) -> AuthContext:
    prefix, _, secret = token.removeprefix(KEY_PREFIX).removeprefix(LEGACY_KEY_PREFIX).partition("_")
    key = session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
    if key is None or not hmac.compare_digest(key.secret_hash, hashlib.sha256(secret.encode()).hexdigest()):
        raise Unauthorized("invalid API key")
    if key.revoked_at is not None:
        raise Unauthorized("API key revoked")
    membership = membership_of(session=session, user_id=key.created_by_id, team_id=key.team_id)
    if membership is None or not membership.user.is_active:
        raise Unauthorized("API key's creator is no longer a member of its team")
    now = utcnow()
    if key.last_used_at is None or now - as_utc(key.last_used_at) > timedelta(seconds=30):
        key.last_used_at = now  # throttled: at most one write per key every 30 s
    role = min(_key_role(key.scopes), membership.role, key=lambda r: r.rank)
    return AuthContext(user=membership.user, team=membership.team, role=role, api_key=key)


def as_utc(moment: datetime) -> datetime:
    """SQLite returns naive datetimes; they are UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def resolve_token(*, session: Session, token: str, secret_key: str) -> AuthContext:
    """The caller behind a bearer token (session token or API key); `Unauthorized` otherwise."""
    if not token.isascii() or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("malformed bearer token")
    if token.startswith((KEY_PREFIX, LEGACY_KEY_PREFIX)):
        return _authenticate_api_key(session, token)
    if not token.startswith(SESSION_PREFIX):
        raise Unauthorized("unrecognised token: expected a session token or an API key (tml-...)")
    claims = _decode_session_token(token, secret_key)
    # one round trip on the hot path: the membership (user and team joined) and whether the session was revoked
    revoked = exists().where(RevokedSession.jti == claims.jti)
    query = select(Membership, revoked).where(
        Membership.user_id == claims.user_id, Membership.team_id == claims.team_id
    )
    found = session.execute(query).first()
    if found[1] if found is not None else session.get(RevokedSession, claims.jti) is not None:
        raise Unauthorized("session ended (logged out): log in again")
    membership = found[0] if found is not None else None
    if membership is None or not membership.user.is_active:
        raise Unauthorized("no longer a member of this team: log in again")
    cutoff = membership.user.sessions_valid_after
    if cutoff is not None and claims.issued_ms < int(as_utc(cutoff).timestamp() * 1000):
        raise Unauthorized("session ended (password changed): log in again")
    return AuthContext(
        user=membership.user,
        team=membership.team,
        role=membership.role,
        session_id=claims.jti,
        session_expires=claims.expires,
    )
