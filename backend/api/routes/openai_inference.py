"""OpenAI's models and chat-completions APIs under `/openai/v1` (docs/openai.md#chat-completions-and-models), beside
the fine-tuning routes (backend/api/routes/openai_compat.py), with the same error envelope and authentication. Models
are the team's registered models and fine-tuned checkpoints (backend/services/openai_inference.py); completions are
sampled by an on-demand inference instance on the generation pool (backend/services/inference.py). Not in the
platform's OpenAPI schema."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from backend.api.deps import MemberAuth, RedisDep, SessionDep, SettingsDep, ViewerAuth, reject_unknown_query
from backend.api.routes.openai_compat import OpenAIRoute, error_body
from backend.db.models import Team
from backend.services import deployment_metrics, deployments, inference
from backend.services import openai_completions as completions
from backend.services import openai_inference as chat
from backend.services.openai_compat import OpenAIError
from backend.services.usage import inference_meter

router = APIRouter(route_class=OpenAIRoute, include_in_schema=False, dependencies=[Depends(reject_unknown_query)])
TIMEOUT_S = 120.0
STATUS = {"no_workers": 503, "load_failed": 500, "timeout": 504, "instance_lost": 502, "invalid_request": 400}


def _error(exc: inference.InferenceError) -> OpenAIError:
    status = STATUS.get(exc.code, 500)
    param = "messages" if exc.code == "invalid_request" else ("model" if exc.code == "load_failed" else None)
    return OpenAIError(exc.message, param=param, code=exc.code, status_code=status)


@router.get("/models")
def list_models(auth: ViewerAuth, session: SessionDep) -> dict[str, Any]:
    return chat.list_models(session, auth.team)


@router.get("/models/{model_id:path}")
def retrieve_model(model_id: str, auth: ViewerAuth, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    key_id = auth.api_key.id if auth.api_key else None
    return chat.model_object(chat.resolve(session, auth.team, model_id, key_id, settings.artifacts), auth.team)


def _resolved(session: Session, team: Team, body: dict[str, Any], key_id: int | None = None,
              artifacts: Path | None = None) -> tuple[chat.ChatCompletionCreate, chat.Prepared]:
    request = chat.parse(body)
    prepared = chat.prepare(request, chat.resolve(session, team, request.model, key_id, artifacts))
    session.close()  # nothing more from the database: do not hold a connection while the model generates
    return request, prepared


def _choice_logprobs(prepared: chat.Prepared, ids: list[int], values: list[float] | None,
                     top: list[Any] | None = None) -> dict[str, Any] | None:
    if values is None:
        return None
    return {"content": chat.token_logprobs(prepared.renderer, ids, values, top), "refusal": None}


@router.post("/chat/completions", response_model=None)
def create_chat_completion(body: Annotated[Any, Body()], auth: MemberAuth, session: SessionDep, client: RedisDep,
                           http: Request, settings: SettingsDep) -> dict[str, Any] | StreamingResponse:
    request, prepared = _resolved(session, auth.team, body, auth.api_key.id if auth.api_key else None,
                                  settings.artifacts)
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    call: dict[str, Any] = {"team_id": auth.team.id, "model_dir": prepared.served.model_dir,
            "adapter_dir": prepared.served.adapter_dir, "requests": [prepared.sample], "timeout_s": TIMEOUT_S,
            **_target(http, client, auth.team.id, auth.api_key.id if auth.api_key else None, prepared.served)}
    if request.stream:
        deltas = inference.sample_deltas(client, **call)
        try:
            first = next(deltas, None)  # errors before the first token are answered as errors, not as a stream
        except inference.InferenceError as exc:
            raise _error(exc) from None
        return StreamingResponse(_stream(request, prepared, completion_id, created, first, deltas),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    try:
        results = inference.sample(client, **call)[0]
    except inference.InferenceError as exc:
        raise _error(exc) from None
    stops = prepared.sample.stop
    choices, completion_tokens = [], 0
    for index, result in enumerate(results):
        completion_tokens += len(result.token_ids)
        text = chat.cut_at_stop(chat.decode(prepared.renderer, result.token_ids), stops)
        choices.append({"index": index, "finish_reason": result.finish_reason,
                        "message": {"role": "assistant", "content": text, "refusal": None, "annotations": []},
                        "logprobs": _choice_logprobs(prepared, result.token_ids, result.logprobs,
                                                     result.topk_logprobs)})
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": request.model,
            "choices": choices, "system_fingerprint": results[0].instance if results else None, "service_tier": None,
            "usage": _usage(len(prepared.prompt_ids), completion_tokens)}


@router.post("/completions", response_model=None)
def create_completion(body: Annotated[Any, Body()], auth: MemberAuth, session: SessionDep, client: RedisDep,
                      http: Request, settings: SettingsDep) -> dict[str, Any]:
    """Legacy text completions (backend/services/openai_completions.py): the model continues the prompt."""
    request = completions.parse(body)
    served = chat.resolve(session, auth.team, request.model, auth.api_key.id if auth.api_key else None,
                          settings.artifacts)
    plan = completions.prepare(request, served)
    session.close()  # nothing more from the database while the model generates
    target = _target(http, client, auth.team.id, auth.api_key.id if auth.api_key else None, served)
    try:
        results = inference.sample(client, team_id=auth.team.id, model_dir=served.model_dir,
                                   adapter_dir=served.adapter_dir, requests=[plan.sample], timeout_s=TIMEOUT_S,
                                   **target)[0]
    except inference.InferenceError as exc:
        raise _error(exc) from None
    return completions.response(request, plan, results, f"cmpl-{uuid.uuid4().hex}", int(time.time()))


def _target(http: Request, client: Any, team_id: int, key_id: int | None, served: chat.Served) -> dict[str, Any]:
    """The call's usage meter, and for a deployment's model its route (its replicas) and metrics."""
    factory = http.app.state.session_factory
    meter = inference_meter(factory, team_id, key_id)
    if served.deployment_id is None:
        return {"meter": meter}
    return {"meter": deployment_metrics.metered(client, served.deployment_id, meter),
            "route": deployments.route_for(factory, served.deployment_id, served.adapter)}


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _stream(request: chat.ChatCompletionCreate, prepared: chat.Prepared, completion_id: str, created: int,
            first: inference.Delta | None, rest: Iterator[inference.Delta]) -> Iterator[bytes]:
    """Server-sent events in OpenAI's chunk format: a role chunk per choice, content deltas (text that can no longer
    change: stop strings are held back until they cannot match), a finish chunk per choice, usage if asked, [DONE]."""
    def event(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> bytes:
        chunk = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                 "system_fingerprint": None, "choices": choices}
        if request.stream_options is not None and request.stream_options.include_usage:
            chunk["usage"] = usage
        return f"data: {json.dumps(chunk)}\n\n".encode()

    n, stops = prepared.sample.n, prepared.sample.stop
    tokens: list[list[int]] = [[] for _ in range(n)]
    sent = [""] * n
    completion_tokens = 0
    yield event([{"index": k, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None} for k in range(n)])
    try:
        deltas = ([first] if first is not None else [])
        for delta in _chain(deltas, rest):
            k = delta.sample
            before = len(tokens[k])
            tokens[k].extend(delta.token_ids)
            completion_tokens += len(delta.token_ids)
            text = chat.decode(prepared.renderer, tokens[k])
            shown = chat.cut_at_stop(text, stops) if delta.finish_reason else chat.safe_prefix(text, stops)
            piece = shown[len(sent[k]):] if shown.startswith(sent[k]) else ""
            sent[k] += piece
            logprobs = _choice_logprobs(prepared, tokens[k][before:], delta.logprobs)
            if piece or logprobs:
                yield event([{"index": k, "delta": {"content": piece}, "logprobs": logprobs, "finish_reason": None}])
            if delta.finish_reason:
                yield event([{"index": k, "delta": {}, "logprobs": None, "finish_reason": delta.finish_reason}])
    except inference.InferenceError as exc:  # the stream has begun: the error is its last event
        failure = _error(exc)
        body = error_body(failure.status_code, failure.detail, param=failure.param, code=failure.code)
        yield f"data: {json.dumps(body)}\n\n".encode()
        return
    if request.stream_options is not None and request.stream_options.include_usage:
        chunk = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": request.model,
                 "system_fingerprint": None, "choices": [],
                 "usage": _usage(len(prepared.prompt_ids), completion_tokens)}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _chain(first: list[inference.Delta], rest: Iterator[inference.Delta]) -> Iterator[inference.Delta]:
    yield from first
    yield from rest

