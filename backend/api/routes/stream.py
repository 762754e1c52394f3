"""Server-sent events of one job: an initial `status` snapshot, then what is published on its live channel.

Events: `status` (JobPublic), `metrics`, `event`, `timeline`, `samples` (see backend.services.live). A comment line
is sent every `HEARTBEAT_S` to keep proxies from closing the connection. The stream ends after a terminal status.

A stream holds no database connection while it streams: its setup (the caller resolved from the token, the job's
snapshot) runs in one short session, under the admission layer's bound (backend/api/admission.py), and the session is
closed before the first byte; only the periodic re-check below takes a connection again, for a moment.

The caller's credentials are re-checked every `RECHECK_S` and at once when a revocation is announced on
`REVOCATIONS_CHANNEL` (logout, password change, member removed, key revoked): a stream whose token no longer
resolves to a member of the job's team ends with an `error` event (`{"detail": ...}`) and is closed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio as aioredis
from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from backend.api.deps import BearerToken, IdPath
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import job_public
from backend.db.enums import TERMINAL_JOB_STATUSES, Role
from backend.services.auth import resolve_token
from backend.services.errors import Forbidden, Unauthorized
from backend.services.jobs import get_job
from backend.services.live import REVOCATIONS_CHANNEL, live_channel

router = APIRouter(prefix="/jobs/{job_id}", tags=["jobs"], responses=errors(*AUTHENTICATED))
HEARTBEAT_S = 15.0
RECHECK_S = 5.0


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def _is_terminal(status_data: Any) -> bool:
    return isinstance(status_data, dict) and status_data.get("status") in TERMINAL_JOB_STATUSES


@router.get(
    "/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}, **errors(503)},
)
async def stream_job(job_id: IdPath, request: Request, token: BearerToken) -> StreamingResponse:
    """Live events of a job (SSE); 503 when Redis is unavailable. Closes when the caller's access ends."""
    settings = request.app.state.settings

    def snapshot() -> tuple[int, dict[str, Any]]:
        """The caller's team and the job's status, from one session closed before streaming starts."""
        with request.app.state.read_session_factory() as session:
            auth = resolve_token(session=session, token=token, secret_key=settings.secret_key)
            if not auth.role.at_least(Role.viewer):
                raise Forbidden(f"this action needs role viewer or higher; you are {auth.role.value}")
            job = get_job(session=session, team=auth.team, job_id=job_id)  # 404 for another team's job
            if session.dirty:
                session.commit()  # an API key's throttled last_used_at
            return auth.team.id, job_public(session, job).model_dump(mode="json")

    def still_allowed() -> str | None:
        """None while the token still opens this team's job; else why not."""
        with request.app.state.read_session_factory() as session:
            try:
                current = resolve_token(session=session, token=token, secret_key=settings.secret_key)
            except Unauthorized as exc:
                return exc.detail
            return None if current.team.id == team_id else "the token now belongs to another team"

    url = request.app.state.redis_url
    if url is None:
        raise HTTPException(503, "Redis is not available: live streaming is off (see GET /api/v1/ready)")
    client = aioredis.Redis.from_url(url, socket_connect_timeout=2)
    pubsub = client.pubsub()
    try:
        # before the snapshot: nothing published in between is lost
        await pubsub.subscribe(live_channel(job_id), REVOCATIONS_CHANNEL)
        team_id, initial = await run_in_threadpool(snapshot)
    except redis.RedisError as exc:
        await client.aclose()
        raise HTTPException(503, f"Redis is not available: live streaming is off ({exc})") from None
    except BaseException:
        await client.aclose()
        raise

    async def events() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        checked = beat = loop.time()
        try:
            yield sse("status", initial)
            if _is_terminal(initial):
                return
            while not await request.is_disconnected():
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=RECHECK_S)
                now = loop.time()
                revoked = message is not None and message["channel"] == REVOCATIONS_CHANNEL.encode()
                if revoked or now - checked >= RECHECK_S:
                    checked = now
                    reason = await run_in_threadpool(still_allowed)
                    if reason is not None:
                        yield sse("error", {"detail": f"access ended: {reason}"})
                        return
                if message is None or revoked:
                    if now - beat >= HEARTBEAT_S:
                        beat = now
                        yield b": heartbeat\n\n"
                    continue
                beat = now
                payload = json.loads(message["data"])
                yield sse(payload["type"], payload["data"])
                if payload["type"] == "status" and _is_terminal(payload["data"]):
                    return
        finally:
            await pubsub.aclose()
            await client.aclose()

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
