"""What the Tinker API's route modules share (backend/api/routes/tinker.py, tinker_sampling.py): the route class
that answers every error as `{"detail": ...}` with `x-should-retry: false` (never a 500 for bad input), the SDK's
`X-API-Key` auth, the request body base and the future a call answers."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import redis
from fastapi import Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from backend.api.deps import SessionDep, SettingsDep
from backend.db.enums import Role
from backend.services import tinker as svc
from backend.services import tinker_wire as wire
from backend.services.auth import AuthContext, resolve_token
from backend.services.errors import ServiceError


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status_code, headers={"x-should-retry": "false"})


class TinkerRoute(APIRoute):
    """Errors of the route, its dependencies and its body validation answer `{"detail": ...}` (never a 500 for bad
    input)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except svc.TinkerError as exc:
                return _error(exc.status_code, exc.message)
            except wire.WireError as exc:
                return _error(400, f"malformed protobuf body: {exc}")
            except ServiceError as exc:
                return _error(exc.status_code, exc.detail)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
                where = ".".join(str(part) for part in first.get("loc", ())[1:])
                return _error(400, f"{where}: {first.get('msg')}" if where else str(first.get("msg")))
            except (redis.ConnectionError, redis.TimeoutError):
                return JSONResponse({"detail": "Redis is unavailable right now; retry shortly"}, status_code=503)

        return answer


def _resolve(session: Session, token: str, secret_key: str) -> AuthContext:
    auth = resolve_token(session=session, token=token, secret_key=secret_key)
    if session.dirty:
        session.commit()
    return auth


async def tinker_auth(request: Request, session: SessionDep, settings: SettingsDep) -> AuthContext:
    """The caller of the SDK's `X-API-Key` header (or a bearer token); writes need the member role."""
    token = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
    if not token:
        raise svc.TinkerError(401, "missing API key: pass api_key='tml-...' (a platform API key) to the client")
    try:
        auth = await run_in_threadpool(_resolve, session, token.strip(), settings.secret_key)
    except ServiceError as exc:
        raise svc.TinkerError(401, exc.detail) from exc
    if request.method != "GET" and not auth.role.at_least(Role.member):
        raise svc.TinkerError(403, f"this call needs role member or higher; you are {auth.role.value}")
    return auth


Auth = Annotated[AuthContext, Depends(tinker_auth)]


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


def future(request_id: str, model_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """An UntypedAPIFuture: the SDK polls retrieve_future with its request id."""
    return {"request_id": request_id, "model_id": model_id, **extra}
