"""`Annotated` dependency aliases shared by every router (FastAPI full-stack template style)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Annotated, Any

import redis
from fastapi import Depends, HTTPException, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from backend.api.auth_cache import AuthCache
from backend.db.enums import Role
from backend.db.models import Job, Team, User
from backend.schemas.common import MAX_ID
from backend.schemas.jobs import TAG_PATTERN
from backend.services.auth import AuthContext, resolve_token
from backend.services.errors import Forbidden, InvalidInput, Unauthorized
from backend.services.jobs import get_job
from backend.services.sessions import is_platform_admin
from backend.services.strict_json import BadJson, check_text
from contract.settings import Settings

_QUERY_NAMES_ATTR = "_streamrl_query_names"  # cached on the route object
READ_METHODS = frozenset({"GET", "HEAD"})


def _query_names(dependant: Any) -> Iterator[str]:
    for param in dependant.query_params:
        yield getattr(param, "alias", None) or param.name
    for sub in dependant.dependencies:
        yield from _query_names(sub)


async def reject_unknown_query(request: Request) -> None:
    """Router dependency (async, like every dependency here that does no I/O: no threadpool hop per request): a
    query parameter the route does not declare, or one given twice, is 422 (a typo such
    as `?ofset=` must not be silently ignored; every declared parameter is a single value)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known: frozenset[str] | None = getattr(route, _QUERY_NAMES_ATTR, None)
    if known is None:
        known = frozenset(_query_names(dependant))
        setattr(route, _QUERY_NAMES_ATTR, known)
    for name in request.query_params:
        shown = ascii(name[:100])
        if name not in known:
            expected = ", ".join(sorted(known)) or "none"
            raise InvalidInput(f"unknown query parameter {shown} (expected: {expected})", loc=("query", shown))
        values = request.query_params.getlist(name)
        if len(values) > 1:
            raise InvalidInput(f"query parameter {shown} is given more than once", loc=("query", name))
        try:
            check_text(values[0])
        except BadJson as exc:
            raise InvalidInput(f"query parameter {shown} {exc}", loc=("query", name)) from None


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_db(request: Request) -> AsyncIterator[Session]:
    """One session per request; routes commit explicitly, anything uncommitted is rolled back. GET and HEAD get an
    autocommit session (each statement its own transaction: a read saves the BEGIN and ROLLBACK round trips; the one
    write a read may make, an API key's throttled `last_used_at`, commits at once).

    Async: making a session does no I/O (it connects on its first query, in the sync dependency or route that runs
    it), and closing a read session only returns its connection to the pool (there is no transaction to roll back),
    so reads cost no thread hop here; a write session's close (a ROLLBACK of what was not committed) runs in a
    thread."""
    if request.method in READ_METHODS:
        with request.app.state.read_session_factory() as session:
            yield session
        return
    session = request.app.state.session_factory()
    try:
        yield session
    finally:
        await run_in_threadpool(session.close)


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
IdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="object id")]
TagQuery = Annotated[str | None, Query(pattern=TAG_PATTERN, description="only jobs carrying this tag")]
TextQuery = Annotated[
    str | None, Query(min_length=1, max_length=200, description="text in the name, tags or notes (any case)")
]
SessionDep = Annotated[Session, Depends(get_db)]
_bearer = HTTPBearer(auto_error=False, description="session token (POST /auth/login) or API key srl_...")


async def get_auth(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AuthContext:
    """The caller. Reads may be answered from the process's auth cache (backend/api/auth_cache.py: no query, no
    thread hop); writes always resolve from the database."""
    if creds is None:
        raise Unauthorized("missing bearer token: send `Authorization: Bearer <session token or API key>`")
    token = creds.credentials
    cache: AuthCache = request.app.state.auth_cache
    if request.method not in READ_METHODS:
        return await run_in_threadpool(_resolve, session, token, settings.secret_key)
    cached = cache.get(token, session)
    if cached is not None:
        return cached
    generation = cache.generation
    auth = await run_in_threadpool(_resolve, session, token, settings.secret_key)
    cache.put(token, auth, generation)
    return auth


def _resolve(session: Session, token: str, secret_key: str) -> AuthContext:
    auth = resolve_token(session=session, token=token, secret_key=secret_key)
    if session.dirty:
        session.commit()  # API key last_used_at
    return auth


AuthDep = Annotated[AuthContext, Depends(get_auth)]


async def get_bearer_token(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> str:
    """The raw bearer token (for re-checking it later, e.g. during a long-lived stream)."""
    if creds is None:
        raise Unauthorized("missing bearer token: send `Authorization: Bearer <session token or API key>`")
    return creds.credentials


BearerToken = Annotated[str, Depends(get_bearer_token)]


async def get_current_user(auth: AuthDep) -> User:
    return auth.user


async def get_current_team(auth: AuthDep) -> Team:
    return auth.team


CurrentUser = Annotated[User, Depends(get_current_user)]
CurrentTeam = Annotated[Team, Depends(get_current_team)]


def require_role(minimum: Role) -> Callable[[AuthContext], Awaitable[AuthContext]]:
    """Dependency: the caller's effective role in the current team is at least `minimum` (else 403)."""

    async def check(auth: AuthDep) -> AuthContext:
        if not auth.role.at_least(minimum):
            raise Forbidden(f"this action needs role {minimum.value} or higher; you are {auth.role.value}")
        return auth

    return check


async def require_platform_admin(auth: AuthDep, settings: SettingsDep) -> AuthContext:
    """Dependency: the caller is an operator (platform admin) using a session or an admin-scoped key (else 403)."""
    if not is_platform_admin(auth.user, settings.platform_admins):
        raise Forbidden("only a platform admin (operator) may change this; see STREAMRL_PLATFORM_ADMINS")
    if auth.api_key is not None and "admin" not in auth.api_key.scopes:
        raise Forbidden("this action needs an API key with the admin scope")
    return auth


PlatformAdminAuth = Annotated[AuthContext, Depends(require_platform_admin)]
ViewerAuth = Annotated[AuthContext, Depends(require_role(Role.viewer))]
MemberAuth = Annotated[AuthContext, Depends(require_role(Role.member))]
AdminAuth = Annotated[AuthContext, Depends(require_role(Role.admin))]


def get_viewed_job(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> Job:
    """The path's `job_id` among the caller's team's jobs (404 for a missing job or another team's)."""
    return get_job(session=session, team=auth.team, job_id=job_id)


ViewedJob = Annotated[Job, Depends(get_viewed_job)]


async def get_optional_redis(request: Request) -> redis.Redis | None:
    """The app's Redis client, or None when none is configured (publishing is then skipped)."""
    return request.app.state.redis


async def get_redis(client: Annotated[redis.Redis | None, Depends(get_optional_redis)]) -> redis.Redis:
    if client is None:
        raise HTTPException(503, "Redis is not available: live features are off (see GET /api/v1/ready)")
    return client


OptionalRedisDep = Annotated[redis.Redis | None, Depends(get_optional_redis)]
RedisDep = Annotated[redis.Redis, Depends(get_redis)]
