"""Translate service errors into HTTP answers (`{"detail": ...}` plus extra fields such as `current_status`)."""

from __future__ import annotations

import math
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from backend.services.errors import ServiceError, Unauthorized

RETRY_AFTER_S = "30"
SPA_PATH = "/{path:path}"  # backend.api.static
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MAX_ECHO_CHARS = 200


def _safe(value: Any) -> Any:
    """A JSON-serialisable, bounded echo of an input: non-finite floats and invalid Unicode become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        text = value if len(value) <= MAX_ECHO_CHARS else value[:MAX_ECHO_CHARS] + "..."
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, bool | int | float) or value is None:
        return value
    return None  # containers are not echoed (they may be huge); `loc` names the place


def _issue(error: dict[str, Any]) -> dict[str, Any]:
    issue = {"loc": [_safe(part) if isinstance(part, str) else part for part in error.get("loc", ())],
             "msg": _safe(str(error.get("msg", ""))), "type": str(error.get("type", "value_error"))}
    echoed = _safe(error.get("input"))
    if echoed is not None:
        issue["input"] = echoed
    return issue


async def validation_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 shape, built so it always serialises (FastAPI's own echoes NaN and surrogates and fails)."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": [_issue(error) for error in exc.errors()]}, status_code=422)


async def service_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if exc.status_code == 429:
        headers["Retry-After"] = RETRY_AFTER_S
    headers.update(exc.headers)
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers or None)


async def integrity_error_handler(_request: Request, _exc: Exception) -> JSONResponse:
    """A concurrent request created the same unique object first (services check, but races remain)."""
    return JSONResponse({"detail": "conflicts with an existing object (retry the request)"}, status_code=409)


OUTAGE_RETRY_AFTER_S = 5


async def outage_handler(_request: Request, exc: Exception) -> JSONResponse:
    """The database or Redis is unreachable (a restart, a failover): 503 with Retry-After, never a 500; nothing was
    half-written (the request's transaction did not commit)."""
    service = "the database" if isinstance(exc, OperationalError | InterfaceError) else "Redis"
    return JSONResponse({"detail": f"{service} is unavailable right now; retry in {OUTAGE_RETRY_AFTER_S} s"},
                        status_code=503, headers={"Retry-After": str(OUTAGE_RETRY_AFTER_S)})


def allowed_methods(request: Request) -> list[str]:
    """Every method some route accepts at this path (FastAPI makes one route per method, so Starlette's own 405
    names only the first route that matched the path): each method is tried against the routing table."""
    routes = [r for r in request.app.router.routes if getattr(r, "path", "") != SPA_PATH]  # not the dashboard's
    methods = {
        method
        for method in HTTP_METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    }
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def http_error_handler(request: Request, exc: Exception) -> Response:
    """FastAPI's handler; a 405 carries the full `Allow` list."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405:
        allowed = allowed_methods(request)
        headers = {**(exc.headers or {}), "Allow": ", ".join(allowed)}
        return JSONResponse({"detail": f"method {request.method} not allowed here; allowed: {', '.join(allowed)}"},
                            status_code=405, headers=headers)
    return await http_exception_handler(request, exc)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(ServiceError, service_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(IntegrityError, integrity_error_handler)
    for outage in (OperationalError, InterfaceError, redis.ConnectionError, redis.TimeoutError):
        app.add_exception_handler(outage, outage_handler)
