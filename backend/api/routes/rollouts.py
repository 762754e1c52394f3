"""The rollout gateway (docs/architecture.md#rollout-gateway): `POST /jobs/{id}/rollouts/claim` hands an agent an
open episode of a `environment.type: gateway` job; `/rollouts/{episode}/v1` is an OpenAI-compatible base URL for that
episode (its token as the api key) whose chat completions are sampled by the job's generation instance and recorded
for training (`/rollouts/{episode}/key/{token}/v1`: the same, the token in the path, for a client that cannot send
it as its key); `POST /rollouts/{episode}/reward` ends the episode (backend/services/rollout_gateway.py). The episode
routes are async on the app's asyncio Redis client (`app.state.async_redis`) and take no admission work slot
(backend/api/admission.py `unbounded_paths`): they wait on the instance, not on this process."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Body, Depends, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy import select

from backend.api.deps import MemberAuth, RedisDep, SessionDep, SettingsDep, reject_unknown_query
from backend.api.routes.openai_compat import OpenAIRoute
from backend.db.models import Job
from backend.services import rollout_gateway as gateway
from backend.services.openai_compat import OpenAIError
from contract.signing import SIGNATURE_HEADER, agent_secret

router = APIRouter(route_class=OpenAIRoute, include_in_schema=False, dependencies=[Depends(reject_unknown_query)])


async def _redis(http: Request) -> aioredis.Redis:
    """Async although it awaits nothing: a sync dependency would cost every gateway call a thread-pool hop (a
    py-spy profile of bench/gateway.py put about 14% of the API process's time in waking that thread)."""
    client: aioredis.Redis | None = getattr(http.app.state, "async_redis", None)
    if client is None:
        raise OpenAIError("Redis is not available: the rollout gateway is off (see GET /api/v1/ready)",
                          code="unavailable", status_code=503)
    return client


AsyncRedisDep = Annotated[aioredis.Redis, Depends(_redis)]


KEYED_PATH = re.compile(r"(/rollouts/[^/?#]*/key/)[^/?#]*")


class KeyRedaction(logging.Filter):
    """Blanks the episode token of a keyed gateway path (`/rollouts/{episode}/key/{token}/v1/...`) in uvicorn's
    access log line (its record's args: client, method, path, http version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "/key/" in args[2]:
            record.args = (*args[:2], KEYED_PATH.sub(r"\1***", args[2]), *args[3:])
        return True


def redact_access_log() -> None:
    """Install `KeyRedaction` on uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, KeyRedaction) for f in access.filters):
        access.addFilter(KeyRedaction())


def _token(authorization: str | None) -> str | None:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


@router.post("/jobs/{job_id}/rollouts/claim", response_model=None)
def claim_episode(job_id: int, auth: MemberAuth, session: SessionDep, client: RedisDep,
                  http: Request) -> dict[str, Any] | Response:
    job = session.scalar(select(Job).where(Job.id == job_id, Job.team_id == auth.team.id))
    if job is None:
        raise OpenAIError(f"job {job_id} does not exist", code="job_not_found", status_code=404)
    if (job.spec.get("environment") or {}).get("type") != "gateway":
        raise OpenAIError(f"job {job_id} is not a gateway job (environment.type 'gateway')", param="job_id")
    session.close()
    claimed = gateway.claim(client, job_id, f"{str(http.base_url).rstrip('/')}/api/v1")
    return Response(status_code=204) if claimed is None else claimed


@router.get("/jobs/{job_id}/rollouts/agent")
def agent_signing(job_id: int, auth: MemberAuth, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """What a remote agent (`agent.url`) needs to check that a POST to its /rollout came from this platform: the
    header and the job's secret (HMAC-SHA256 of the raw body, contract/signing.py)."""
    job = session.scalar(select(Job).where(Job.id == job_id, Job.team_id == auth.team.id))
    if job is None:
        raise OpenAIError(f"job {job_id} does not exist", code="job_not_found", status_code=404)
    agent = job.spec.get("agent") or {}
    if not agent.get("url"):
        raise OpenAIError(f"job {job_id} has no agent.url", param="agent.url")
    return {"job": job_id, "url": agent["url"], "signature_header": SIGNATURE_HEADER,
            "signing_secret": agent_secret(settings.secret_key, job_id),
            "signature": "sha256=<hex HMAC-SHA256 of the raw request body under signing_secret>"}


@router.get("/rollouts/{episode_id}/v1/models")
async def list_models(episode_id: str, client: AsyncRedisDep,
                      authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
    return await _models(client, episode_id, _token(authorization))


@router.get("/rollouts/{episode_id}/key/{key}/v1/models")
async def list_models_keyed(episode_id: str, key: str, client: AsyncRedisDep) -> dict[str, Any]:
    """The models route of a base URL that carries the episode's token in its path (`_keyed`)."""
    return await _models(client, episode_id, key)


async def _models(client: aioredis.Redis, episode_id: str, token: str | None) -> dict[str, Any]:
    await gateway.episode_state(client, episode_id, token)
    return {"object": "list", "data": [{"id": "policy", "object": "model", "created": 0, "owned_by": "streamrl"}]}


@router.post("/rollouts/{episode_id}/v1/chat/completions", response_model=None)
async def chat_completion(episode_id: str, body: Annotated[Any, Body()], client: AsyncRedisDep,
                          authorization: Annotated[str | None, Header()] = None) -> Response:
    return await _chat(client, episode_id, _token(authorization), body)


@router.post("/rollouts/{episode_id}/key/{key}/v1/chat/completions", response_model=None)
async def chat_completion_keyed(episode_id: str, key: str, body: Annotated[Any, Body()],
                                client: AsyncRedisDep) -> Response:
    """Chat completions at a base URL that carries the episode's token in its path, `.../rollouts/{episode}/key/
    {token}/v1`: for a client that cannot send the token as its key (a served verifiers env's model client sends its
    own process's key as the bearer). Checked exactly as the bearer token (its sha, compared in the call's script;
    401 / 404 / 409 alike); any Authorization header is ignored; the access log never shows the key
    (`KeyRedaction`)."""
    return await _chat(client, episode_id, key, body)


async def _chat(client: aioredis.Redis, episode_id: str, token: str | None, body: Any) -> Response:
    try:
        request = gateway.parse_chat(body)
    except OpenAIError:
        await gateway.episode_state(client, episode_id, token)  # a 401 / 404 / 409 comes before the body's 400
        raise
    reply = await gateway.call(client, episode_id, token, request)  # checks the token and state as it hands it on
    done = gateway.completion(request, reply, f"chatcmpl-{uuid.uuid4().hex}", int(time.time()))
    if not request.stream:  # encoded here: FastAPI's jsonable_encoder would walk every token id of the answer
        return JSONResponse(done)

    async def events() -> AsyncIterator[bytes]:
        for chunk in gateway.chunks(done):
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        if (request.stream_options or {}).get("include_usage"):
            usage = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"],
                     "model": done["model"], "choices": [], "usage": done["usage"]}
            yield f"data: {json.dumps(usage)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.post("/rollouts/{episode_id}/reward")
async def post_reward(episode_id: str, body: Annotated[Any, Body()], client: AsyncRedisDep,
                      authorization: Annotated[str | None, Header()] = None) -> dict[str, Any]:
    state = await gateway.episode_state(client, episode_id, _token(authorization))
    if not isinstance(body, dict) or set(body) - {"reward"}:
        raise OpenAIError("the body must be {\"reward\": number | null}", param="reward")
    await gateway.end(client, episode_id, state, body.get("reward"))
    return {"episode": episode_id, "ended": True}
