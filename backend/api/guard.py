"""ASGI middleware in front of every route.

- `BodyGuard`: request bodies are capped (413; uploads to `upload_paths` get the upload limit, everything else
  `max_request_bytes`); a JSON body must parse as strict JSON (backend.services.strict_json: no NaN/Infinity,
  bounded integers and nesting, no lone UTF-16 surrogates) or it is 422 before any route sees it.
- `SecurityHeaders`: CSP, frame-ancestors/X-Frame-Options, nosniff and Referrer-Policy on every answer, API and
  dashboard alike (the interactive /docs and /redoc pages load their assets from this server, never a CDN: their
  CSP allows only 'self' plus the inline boot script).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.services.strict_json import BadJson, strict_json_loads

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
APP_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
DOCS_PATHS = ("/docs", "/redoc", "/static-offline-docs")


class _TooLarge(HTTPException):
    """Raised from `receive` while a route parses its body; FastAPI passes HTTPExceptions through as answers."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


async def _send_json(send: Send, status: int, detail: Any) -> None:
    body = json.dumps({"detail": detail}, ensure_ascii=True).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    def __init__(self, app: ASGIApp, *, limits: Callable[[], tuple[int, int]], upload_paths: tuple[str, ...]) -> None:
        self.app, self.limits, self.upload_paths = app, limits, upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        max_request, max_upload = self.limits()
        path: str = scope["path"]
        limit = max_upload if path.rstrip("/").endswith(self.upload_paths) else max_request
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > limit:
            await _send_json(send, 413, f"request body exceeds the limit of {limit} bytes")
            return
        content_type = headers.get(b"content-type", b"").lower()
        if not content_type or b"json" in content_type:  # FastAPI parses a body without a content type as JSON
            await self._json(scope, receive, send, limit)
        else:
            await self._streamed(scope, receive, send, limit)

    async def _json(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        chunks, total, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # client went away
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:
                await _send_json(send, 413, f"request body exceeds the limit of {limit} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body.strip():
            try:
                strict_json_loads(body)
            except BadJson as exc:
                issue = {"loc": ["body", *exc.loc], "msg": str(exc), "type": "json_invalid"}
                await _send_json(send, 422, [issue])
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _streamed(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        total, started = 0, False

        async def counting() -> Message:
            nonlocal total
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > limit:
                    raise _TooLarge(limit)
            return message

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting, tracking)
        except _TooLarge:
            if started:
                raise
            await _send_json(send, 413, f"request body exceeds the limit of {limit} bytes")


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if scope["path"].startswith(DOCS_PATHS) else APP_CSP

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _OURS]
                headers += [
                    (b"content-security-policy", csp.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


_OURS = {b"content-security-policy", b"x-content-type-options", b"x-frame-options", b"referrer-policy"}
