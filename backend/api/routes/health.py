"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from backend.api.openapi import errors

router = APIRouter(tags=["health"])


@router.get("/health", responses=errors())
def health() -> dict[str, str]:
    """The process is up (no dependencies checked)."""
    return {"status": "ok"}


@router.get("/ready", responses={503: {"description": "a dependency is down"}, **errors()})
def ready(request: Request) -> JSONResponse:
    """Database and Redis reachable: 200, else 503 naming what is down."""
    report: dict[str, str] = {}
    try:
        with request.app.state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        report["database"] = "ok"
    except Exception as exc:  # any failure means "not ready"; the message says why
        report["database"] = f"error: {exc.__class__.__name__}: {str(exc).splitlines()[0][:200]}"
    client = request.app.state.redis
    if client is None:
        report["redis"] = "error: not configured (embedded Redis could not start)"
    else:
        try:
            client.ping()
            report["redis"] = "ok"
        except Exception as exc:
            report["redis"] = f"error: {exc.__class__.__name__}: {str(exc)[:200]}"
    healthy = all(value == "ok" for value in report.values())
    return JSONResponse(report, status_code=200 if healthy else 503)
