"""Translate service errors into HTTP answers (`{"detail": ...}` plus extra fields such as `current_status`)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from backend.services.errors import ServiceError, Unauthorized

RETRY_AFTER_S = "30"


async def service_error_handler(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if exc.status_code == 429:
        headers["Retry-After"] = RETRY_AFTER_S
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=headers or None)


async def integrity_error_handler(_request: Request, _exc: Exception) -> JSONResponse:
    """A concurrent request created the same unique object first (services check, but races remain)."""
    return JSONResponse({"detail": "conflicts with an existing object (retry the request)"}, status_code=409)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, service_error_handler)
    app.add_exception_handler(IntegrityError, integrity_error_handler)
