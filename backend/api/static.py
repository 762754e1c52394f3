"""Serve the built dashboard (frontend/dist) at `/` with single-page-app fallback to index.html."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse

from backend.api.errors import allowed_methods

DIST = Path(__file__).resolve().parents[2] / "frontend" / "dist"
NOT_SPA = ("api/", "metrics", "docs", "redoc", "openapi.json")


def install_frontend(app: FastAPI, dist: Path = DIST) -> bool:
    """Mount the dashboard if it was built; returns whether it was."""
    index = dist / "index.html"
    if not index.is_file():
        return False
    root = dist.resolve()

    @app.get("/{path:path}", include_in_schema=False)
    def spa(path: str, request: Request) -> FileResponse:
        if path.startswith(NOT_SPA):
            if allowed_methods(request):
                raise HTTPException(405)  # an API path without GET (the handler adds Allow)
            raise HTTPException(404, f"no route /{path}")
        candidate = (root / path).resolve()
        if path and candidate.is_file() and candidate.is_relative_to(root):
            return FileResponse(candidate)
        return FileResponse(index)

    return True
