"""Server-sent events of one job: an initial `status` snapshot, then what is published on its live channel.

Events: `status` (JobPublic), `metrics`, `event`, `timeline`, `samples` (see backend.services.live). A comment line
is sent every `HEARTBEAT_S` to keep proxies from closing the connection. The stream ends after a terminal status.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from backend.api.deps import IdPath, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import job_public
from backend.db.enums import TERMINAL_JOB_STATUSES
from backend.services.jobs import get_job
from backend.services.live import live_channel

router = APIRouter(prefix="/jobs/{job_id}", tags=["jobs"], responses=errors(*AUTHENTICATED))
HEARTBEAT_S = 15.0


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def _is_terminal(status_data: Any) -> bool:
    return isinstance(status_data, dict) and status_data.get("status") in TERMINAL_JOB_STATUSES


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **errors(503)},
)
async def stream_job(job_id: IdPath, request: Request, auth: ViewerAuth) -> StreamingResponse:
    """Live events of a job (SSE); 503 when Redis is unavailable."""

    def snapshot() -> dict[str, Any]:
        with request.app.state.session_factory() as session:
            job = get_job(session=session, team=auth.team, job_id=job_id)  # 404 for another team's job
            return job_public(session, job).model_dump(mode="json")

    url = request.app.state.redis_url
    if url is None:
        raise HTTPException(503, "Redis is not available: live streaming is off (see GET /api/v1/ready)")
    client = aioredis.Redis.from_url(url, socket_connect_timeout=2)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(live_channel(job_id))  # before the snapshot: nothing published in between is lost
        initial = await run_in_threadpool(snapshot)
    except redis.RedisError as exc:
        await client.aclose()
        raise HTTPException(503, f"Redis is not available: live streaming is off ({exc})") from None
    except BaseException:
        await client.aclose()
        raise

    async def events() -> AsyncIterator[bytes]:
        try:
            yield sse("status", initial)
            if _is_terminal(initial):
                return
            while not await request.is_disconnected():
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=HEARTBEAT_S)
                if message is None:
                    yield b": heartbeat\n\n"
                    continue
                payload = json.loads(message["data"])
                yield sse(payload["type"], payload["data"])
                if payload["type"] == "status" and _is_terminal(payload["data"]):
                    return
        finally:
            await pubsub.aclose()
            await client.aclose()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
