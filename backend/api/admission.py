"""Admission: how many HTTP requests this process works on at once, and in which order the rest wait.

Two bounds, both held by requests waiting in the event loop (holding neither a thread nor a connection), woken in
arrival order (asyncio's semaphores are FIFO):

- **Work slots** (`api_concurrency`, default 8). A request's route runs on a worker thread; with dozens of threads
  contending for the GIL, which request runs next is close to random and the event loop itself waits behind them,
  so under load the slowest requests took 3-4x the median (bench/api_load.py: p99 208-423 ms at p50 38-59 ms with
  the 30-request bound below; 72-108 ms with 2-8 work slots, at higher throughput). Taking turns keeps the tail close
  to the median.
- **The database pool** (size + overflow). A request holds its pooled connection from its first query to its
  response and needs a worker thread in between: with more requests in flight than connections, threads can all be
  held by requests waiting for a connection while every connection belongs to a request waiting for a thread, and
  nothing moves until the pool's timeout turns them into errors. In-flight requests never exceed the pool.

Uploads (bodies arriving at a client's pace) use the pool's remaining slots, not work slots, so slow uploaders cannot
stall the API; where the pool is no bigger than the work slots they share them. Event streams take a work slot for
their setup only (auth and the job's snapshot, from a session closed before streaming): the slot is given back when
the response starts, so a hundred dashboards reconnecting at once queue here instead of draining the pool, and
streams that then live for minutes hold neither a slot nor a connection.

Requests under `unbounded_paths` (the rollout gateway's episode routes) take no slot: their routes are async, use no
database connection and spend their time waiting on Redis for a generation instance, so bounding them would only
queue agents behind each other (bench/gateway.py: 64 concurrent agents on 8 slots).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from sqlalchemy import Engine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STREAM_SUFFIX = "/stream"


def pool_capacity(engine: Engine) -> int | None:
    """Connections the engine's pool can hand out at once (pool size + overflow); None for a pool without that
    bound (e.g. the single shared connection of an in-memory SQLite database)."""
    pool = engine.pool
    size, overflow = getattr(pool, "size", None), getattr(pool, "_max_overflow", None)
    if not callable(size) or not isinstance(overflow, int) or overflow < 0:
        return None
    return int(size()) + overflow


class Slots(NamedTuple):
    limit: int  # work slots
    upload_limit: int | None  # 0: uploads take work slots; None: unbounded


def admission_slots(concurrency: int, capacity: int | None) -> Slots:
    """`AdmissionLimit` bounds for `concurrency` work slots on a pool of `capacity` connections (None: unbounded):
    work + upload slots never exceed the pool."""
    if capacity is None:
        return Slots(concurrency, None)
    if capacity > concurrency:
        return Slots(concurrency, capacity - concurrency)
    return Slots(capacity, 0)  # uploads share the work slots


class AdmissionLimit:
    def __init__(
        self, app: ASGIApp, limit: int, upload_limit: int | None = 0, upload_paths: tuple[str, ...] = (),
        unbounded_paths: tuple[str, ...] = (),
    ) -> None:
        """`limit` work slots; `upload_limit` slots for requests under `upload_paths` (0: they take work slots,
        None: unbounded); requests under `unbounded_paths` take none."""
        if limit < 1:
            raise ValueError(f"admission limit must be >= 1, got {limit}")
        if upload_limit is not None and upload_limit < 0:
            raise ValueError(f"upload admission limit must be >= 0, got {upload_limit}")
        self.app, self.limit, self.upload_limit, self.upload_paths = app, limit, upload_limit, upload_paths
        self.unbounded_paths = unbounded_paths
        self._work: asyncio.Semaphore | None = None  # made on first use, inside the server's event loop
        self._uploads: asyncio.Semaphore | None = None

    def _slots(self, path: str) -> asyncio.Semaphore | None:
        if self.unbounded_paths and path.startswith(self.unbounded_paths):
            return None
        if self._work is None:
            self._work = asyncio.Semaphore(self.limit)
            if self.upload_limit:
                self._uploads = asyncio.Semaphore(self.upload_limit)
        if self.upload_limit != 0 and self.upload_paths and path.startswith(self.upload_paths):
            return self._uploads  # None when unbounded
        return self._work

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        slots = self._slots(scope["path"])
        if slots is None:
            await self.app(scope, receive, send)
            return
        if scope["path"].endswith(STREAM_SUFFIX):
            await self._stream(slots, scope, receive, send)
            return
        async with slots:
            await self.app(scope, receive, send)

    async def _stream(self, slots: asyncio.Semaphore, scope: Scope, receive: Receive, send: Send) -> None:
        """An event stream holds its slot until its response starts (headers sent), never while it streams."""
        await slots.acquire()
        held = True

        async def send_then_release(message: Message) -> None:
            nonlocal held
            if held and message["type"] == "http.response.start":
                held = False
                slots.release()
            await send(message)

        try:
            await self.app(scope, receive, send_then_release)
        finally:
            if held:
                slots.release()
