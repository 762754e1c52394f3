"""Admission: at most as many HTTP requests run at once in this process as its database pool has connections.

A request holds its pooled connection from its first query (in the auth dependency, on a worker thread) until its
response, and in between it needs a worker thread again for the route. With more requests in flight than
connections, the threads can all be taken by requests waiting for a connection while every connection belongs to a
request waiting for a thread: nothing moves until the pool's timeout turns them into errors. With in-flight requests
bounded by the pool size no request ever waits for a connection, so that cannot happen; requests over the bound wait
in the event loop, holding neither. Event streams are not counted: they live for minutes and take a connection only
for a moment at a time.
"""

from __future__ import annotations

import asyncio

from sqlalchemy import Engine
from starlette.types import ASGIApp, Receive, Scope, Send

STREAM_SUFFIX = "/stream"


def pool_capacity(engine: Engine) -> int | None:
    """Connections the engine's pool can hand out at once (pool size + overflow); None for a pool without that
    bound (e.g. the single shared connection of an in-memory SQLite database)."""
    pool = engine.pool
    size, overflow = getattr(pool, "size", None), getattr(pool, "_max_overflow", None)
    if not callable(size) or not isinstance(overflow, int) or overflow < 0:
        return None
    return int(size()) + overflow


class AdmissionLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"admission limit must be >= 1, got {limit}")
        self.app, self.limit = app, limit
        self._slots: asyncio.Semaphore | None = None  # made on first use, inside the server's event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].endswith(STREAM_SUFFIX):
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            await self.app(scope, receive, send)
