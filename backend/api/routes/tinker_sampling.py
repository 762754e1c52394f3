"""The Tinker API's sampling routes (included by backend/api/routes/tinker.py): sampling sessions (samplers) and
`asample`, which `SamplingClient.sample` and `compute_logprobs` call. Mapping: backend/services/tinker_sampling.py."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import Field
from sqlalchemy.orm import Session

from backend.api.deps import RedisDep, SessionDep, SettingsDep
from backend.api.routes.tinker_common import Auth, Body, TinkerRoute, future
from backend.db.models import Team
from backend.services import tinker as svc
from backend.services import tinker_futures as futures
from backend.services import tinker_sampling as sampling
from backend.services.usage import inference_meter

router = APIRouter(route_class=TinkerRoute, include_in_schema=False)
LONG_POLL_S = 20.0  # retrieve_futures without a timeout (the SDK's own HTTP timeout is 45 s)
LOST_CHECK_S = 0.5


class JoinSamplingSession(Body):
    sampling_session_id: str = Field(max_length=200)


class RetrieveFutures(Body):
    target: dict[str, Any]
    prev_cursor: int = Field(0, ge=0, le=2**62)
    timeout: float | None = Field(None, ge=0, le=600)
    retrieved_request_ids: list[str] = Field(default_factory=list, max_length=10_000)


class CreateSamplingSession(Body):
    session_id: str = Field(max_length=200)
    sampling_session_seq_id: int = 0
    base_model: str | None = Field(None, max_length=1000)
    model_path: str | None = Field(None, max_length=2000)


def _sampler_of(session: Session, client: Any, team: Team, artifacts: Any, *, model_path: str | None,
                base_model: str | None, key_id: int | None = None) -> str:
    """A new sampler of a save_weights_for_sampler path (base model + that adapter) or of a ready base model."""
    if model_path is not None:
        job, kind, directory = svc.resolve_path(session, team, artifacts, model_path, key_id)
        if kind != "sampler_weights":
            raise svc.TinkerError(400, "create_sampling_client takes a save_weights_for_sampler path "
                                       "(tinker://<run>/sampler_weights/<name>)")
        info = svc.model_info(session, job)
        return sampling.register_sampler(client, team, base_model=info["model_name"],
                                         model_dir=info["model_data"]["tokenizer_id"], adapter_dir=str(directory),
                                         model_path=model_path, job_id=job.id)
    from backend.services.models import find_model

    model = find_model(session=session, team_id=team.id, name=base_model or "")
    if model is None or model.state != "ready":
        raise svc.TinkerError(400, f"base_model {base_model!r} is not a ready model of this team")
    return sampling.register_sampler(client, team, base_model=model.name, model_dir=model.path, adapter_dir=None,
                                     model_path=None, job_id=None)


@router.post("/create_sampling_session")
def create_sampling_session(body: CreateSamplingSession, auth: Auth, session: SessionDep, client: RedisDep,
                            settings: SettingsDep) -> dict[str, Any]:
    svc.require_session(client, body.session_id, auth.team)
    sampler = _sampler_of(session, client, auth.team, settings.artifacts, model_path=body.model_path,
                          base_model=body.base_model, key_id=auth.api_key.id if auth.api_key else None)
    return {"type": "create_sampling_session", "sampling_session_id": sampler}


@router.get("/samplers/{sampler_id}")
def get_sampler(sampler_id: str, auth: Auth, client: RedisDep) -> dict[str, Any]:
    record = sampling.get_sampler(client, auth.team, sampler_id)
    return {"sampler_id": sampler_id, "base_model": record["base_model"], "model_path": record["model_path"]}


@router.post("/asample")
async def asample(request: Request, auth: Auth, session: SessionDep, client: RedisDep,
                  settings: SettingsDep) -> dict[str, Any]:
    """Starts the sample and answers its future at once (one sequence id per sample, as the SDK expects)."""
    try:
        body = await request.json()
    except ValueError as err:
        raise svc.TinkerError(400, f"the body is not JSON: {err}") from err
    plan = sampling.read_request(body)
    sampler_id = body.get("sampling_session_id")
    if sampler_id is not None:
        if not isinstance(sampler_id, str) or len(sampler_id) > 200:
            raise svc.TinkerError(400, "sampling_session_id must be a sampler id")
        record = await run_in_threadpool(sampling.get_sampler, client, auth.team, sampler_id)
    else:
        model_path, base_model = body.get("model_path"), body.get("base_model")
        if not isinstance(model_path, str | None) or not isinstance(base_model, str | None) or \
                (model_path is None and base_model is None):
            raise svc.TinkerError(400, "asample needs sampling_session_id, model_path or base_model")
        sampler_id = await run_in_threadpool(_sampler_of, session, client, auth.team, settings.artifacts,
                                             model_path=model_path, base_model=base_model)
        record = await run_in_threadpool(sampling.get_sampler, client, auth.team, sampler_id)
    await run_in_threadpool(sampling.check_vocabulary, plan, record)
    meter = inference_meter(request.app.state.session_factory, auth.team.id, auth.api_key.id if auth.api_key else None)
    target = futures.target_of(sampler_id, body.get("seq_id")) if body.get("sampling_session_id") else None
    request_id = await run_in_threadpool(sampling.start, client, auth.team, record, plan, meter, target)
    return future(request_id, None, sample_sequence_ids=[f"{request_id}.{k}" for k in range(plan.request.n)])


@router.post("/join_sampling_session")
def join_sampling_session(body: JoinSamplingSession, auth: Auth, client: RedisDep) -> dict[str, Any]:
    """A clone id for an unpickled SamplingClient, unique in its sampling session (its seq ids: id * 1e9 + n)."""
    sampling.get_sampler(client, auth.team, body.sampling_session_id)  # 404: not the team's
    return {"type": "join_sampling_session", "client_counter": futures.join(client, body.sampling_session_id)}


@router.post("/retrieve_futures")
async def retrieve_futures(body: RetrieveFutures, auth: Auth, client: RedisDep) -> dict[str, Any]:
    """The sampling session's (clone's) completions after `prev_cursor`: at once when there are some or `timeout`
    is 0, else when one arrives or after `timeout` (default LONG_POLL_S). Results the client has fetched
    (`retrieved_request_ids`) are deleted. Lost samples (their runner gone) are reported failed."""
    sampler_id, clone = futures.check_target(body.model_dump())
    await run_in_threadpool(sampling.get_sampler, client, auth.team, sampler_id)  # 404: not the team's
    await run_in_threadpool(futures.forget, client, auth.team, body.retrieved_request_ids)
    target = futures.Target(sampler_id, clone)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(LONG_POLL_S if body.timeout is None else body.timeout, LONG_POLL_S)
    completions, cursor = await run_in_threadpool(futures.poll, client, target, body.prev_cursor,
                                                  sampling.pending_key)
    checked, delay = loop.time(), 0.002
    while not completions and loop.time() < deadline:
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 1.5, 0.05)
        lost = sampling.pending_key if loop.time() - checked > LOST_CHECK_S else None
        if lost is not None:
            checked = loop.time()
        completions, cursor = await run_in_threadpool(futures.poll, client, target, body.prev_cursor, lost)
    return {"completions": completions, "cursor": cursor}
