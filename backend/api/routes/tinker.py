"""Thinking Machines' Tinker training API under `/tinker/api/v1`, for the unchanged `tinker` SDK (0.38) pointed at
the platform with `base_url=<platform>/tinker` and a platform API key (`tml-...`, sent as `X-API-Key`). Mapping:
docs/tinker.md and backend/services/tinker.py; protobuf payloads: backend/services/tinker_wire.py. Errors are
`{"detail": ...}` with `x-should-retry: false` (the SDK raises its typed APIStatusError); a route this server does
not implement answers 400 "not supported by this server: <name>". Not in the platform's OpenAPI schema."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from backend.api.deps import RedisDep, SessionDep, SettingsDep
from backend.api.routes import tinker_checkpoints, tinker_sampling
from backend.api.routes.tinker_common import Auth, Body, TinkerRoute, future
from backend.services import tinker as svc
from backend.services import tinker_checkpoints as checkpoints
from backend.services import tinker_sampling as sampling
from backend.services import tinker_wire as wire
from backend.services.jobs import record_event
from backend.services.zstd_body import BodyCorrupt, BodyTooLarge, decompress_capped
from contract import keys

PREFIX = "/tinker/api/v1"
LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo")
RETRIEVE_WAIT_S = 10.0
FULL_CHECK_S = 0.5
PROTO = "application/x-protobuf"


router = APIRouter(route_class=TinkerRoute, include_in_schema=False)


def _key(auth: Auth) -> int | None:
    return auth.api_key.id if auth.api_key else None


class CreateSession(Body):
    tags: list[str] = Field(default_factory=list, max_length=100)
    user_metadata: dict[str, Any] | None = None
    sdk_version: str = Field("", max_length=100)


class SessionRef(Body):
    session_id: str = Field(max_length=200)


class LoraConfig(Body):
    rank: int = 32
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfig(Body):
    type: str = "adamw"


class CreateModel(Body):
    session_id: str = Field(max_length=200)
    model_seq_id: int = Field(ge=0, le=2**31)
    base_model: str = Field(max_length=1000)
    lora_config: LoraConfig | None = None
    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)
    user_metadata: Any = None


class ModelRef(Body):
    model_id: str = Field(max_length=300)


class AdamParams(Body):
    learning_rate: float = Field(1e-4, ge=0, le=10)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-12, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0, le=10)
    grad_clip_norm: float = Field(0.0, ge=0)


class OptimStep(Body):
    model_id: str = Field(max_length=300)
    seq_id: int | None = None
    adam_params: AdamParams | None = None
    optimizer_params: dict[str, Any] | None = None


class SaveWeights(Body):
    model_id: str = Field(max_length=300)
    path: str | None = Field(None, max_length=200)
    seq_id: int | None = None
    sampling_session_seq_id: int | None = None
    kind: str = "snapshot"
    overwrite: bool = False
    ttl_seconds: Any = None
    user_metadata: Any = None


class LoadWeights(Body):
    model_id: str | None = Field(None, max_length=300)
    seq_id: int | None = None
    session_id: str | None = Field(None, max_length=200)
    model_seq_id: int | None = Field(None, ge=0, le=2**31)
    base_model: str | None = Field(None, max_length=1000)
    path: str = Field(max_length=2000)
    optimizer: bool = False


class RetrieveFuture(Body):
    request_id: str = Field(max_length=200)
    allow_metadata_only: bool = False


# -- service ----------------------------------------------------------------------------------------------------------
@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/client/config")
def client_config(auth: Auth, settings: SettingsDep) -> dict[str, Any]:
    """Plain httpx transport, uncompressed protobuf fwd/bwd chunks (each within the API's request size cap) sent
    one after another, API keys (no JWT); sampling clients poll their session's completions (retrieve_futures)
    and unpickled ones ask for their clone id (join_sampling_session): backend/services/tinker_futures.py."""
    return {"fwdbwd_max_chunk_bytes_count": max(1024, settings.max_request_bytes // 2),
            "pjwt_auth_enabled": False, "credential_default_source": "api_key", "proto_compress_fwdbwd": False,
            "use_pyqwest_transport": False, "parallel_fwdbwd_chunks": False, "sample_use_retrieve_futures": True,
            "custom_loss_server_side": False, "sample_join_sampling_session": True}


@router.post("/client/dynamic_config")
def client_dynamic_config(auth: Auth) -> dict[str, Any]:
    return {"refresh_interval_sec": 300, "sample_cancel_enabled": False}


@router.post("/telemetry")
def telemetry(auth: Auth) -> dict[str, str]:
    return {"status": "accepted"}  # the SDK's client-side telemetry is not kept


@router.get("/get_server_capabilities")
def server_capabilities(auth: Auth, session: SessionDep) -> dict[str, Any]:
    return {"supported_models": svc.supported_models(session, auth.team)}


@router.post("/create_session")
def create_session(body: CreateSession, auth: Auth, client: RedisDep) -> dict[str, Any]:
    return {"type": "create_session", "session_id": svc.create_session(client, auth.team, auth.user)}


@router.post("/session_heartbeat")
def session_heartbeat(body: SessionRef, auth: Auth, client: RedisDep) -> dict[str, Any]:
    svc.heartbeat(client, body.session_id, auth.team)
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
def finish_session(session_id: str, auth: Auth, session: SessionDep, client: RedisDep,
                   settings: SettingsDep) -> None:
    svc.finish_session(session, client, session_id, auth.team, settings.artifacts)


# -- training ---------------------------------------------------------------------------------------------------------
@router.post("/create_model")
def create_model(body: CreateModel, auth: Auth, session: SessionDep, client: RedisDep) -> dict[str, Any]:
    if body.lora_config is None:
        raise svc.unsupported("full fine-tuning (create_model without lora_config)")
    if body.optimizer_config.type != "adamw":
        raise svc.unsupported(f"optimizer {body.optimizer_config.type!r}")
    metadata = body.user_metadata
    try:  # Tinker takes any JSON values here; the dashboard shows them as text
        if isinstance(metadata, dict):
            metadata = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
        metadata = checkpoints.check_metadata(metadata)
    except checkpoints.CheckpointError as err:
        raise svc.TinkerError(err.status_code, err.message) from err
    job, request_id = svc.create_training_run(
        session, client, auth.team, auth.user, session_id=body.session_id, model_seq_id=body.model_seq_id,
        base_model=body.base_model, rank=body.lora_config.rank, seed=body.lora_config.seed)
    job.created_by_key_id = auth.api_key.id if auth.api_key else None  # its usage is reported under the key
    record_event(session=session, job_id=job.id, kind="tinker", message=(
        f"training client created with the API (LoRA rank {body.lora_config.rank} on {body.base_model})"),
        data={"tinker": "created", "user_metadata": metadata})
    session.commit()
    from backend.services.live import wake_controller

    wake_controller(client)
    return future(request_id, job.name)


@router.post("/get_info")
def get_info(body: ModelRef, auth: Auth, session: SessionDep) -> dict[str, Any]:
    return svc.model_info(session, svc.get_training_run(session, auth.team, body.model_id))


@router.post("/forward_backward")
async def forward_backward(request: Request, auth: Auth, session: SessionDep, client: RedisDep,
                           settings: SettingsDep) -> dict[str, Any]:
    body = await request.body()
    if request.headers.get("content-encoding") == "zstd":  # capped as a plain body is, in a thread (zstd_body.py)
        try:
            body = await run_in_threadpool(decompress_capped, body, settings.max_request_bytes)
        except BodyTooLarge as exc:
            raise svc.TinkerError(413, str(exc)) from exc
        except BodyCorrupt as exc:
            raise svc.TinkerError(400, str(exc)) from exc
    if not request.headers.get("content-type", "").startswith(PROTO):
        raise svc.TinkerError(400, f"forward_backward takes a {PROTO} body (tinker SDK 0.38)")
    parsed = await run_in_threadpool(wire.read_forward_backward, body)
    if parsed.loss_fn not in LOSSES:
        raise svc.unsupported(f"loss_fn {parsed.loss_fn!r} (supported: {', '.join(LOSSES)})")
    if not parsed.data:
        raise svc.TinkerError(400, "forward_backward needs at least one datum")
    data = []
    for index, datum in enumerate(parsed.data):
        inputs = {name: tensor.values for name, tensor in datum.loss_fn_inputs.items()}
        if len(datum.tokens) == 0 or "target_tokens" not in inputs:
            raise svc.TinkerError(400, f"data[{index}] needs model_input tokens and loss_fn_inputs.target_tokens")
        needed = () if parsed.loss_fn == "cross_entropy" else ("logprobs", "advantages")
        for name in ("target_tokens", "weights", "sequence_ratio_mask", *needed):
            if name in inputs and len(inputs[name]) != len(datum.tokens):
                raise svc.TinkerError(400, f"data[{index}].loss_fn_inputs.{name} has {len(inputs[name])} entries "
                                           f"for {len(datum.tokens)} input tokens")
        missing = [name for name in needed if name not in inputs]
        if missing:
            raise svc.TinkerError(400, f"data[{index}]: loss_fn {parsed.loss_fn!r} needs loss_fn_inputs {missing}")
        data.append({"tokens": datum.tokens, "inputs": inputs})
    payload = {"loss_fn": parsed.loss_fn, "config": parsed.loss_fn_config, "forward_only": parsed.forward_only,
               "data": data}
    request_id = await run_in_threadpool(svc.submit, session, client, auth.team, parsed.model_id, parsed.seq_id,
                                         "forward_backward", payload)
    return future(request_id, parsed.model_id)


@router.post("/optim_step")
def optim_step(body: OptimStep, auth: Auth, session: SessionDep, client: RedisDep) -> dict[str, Any]:
    if body.adam_params is None:
        raise svc.unsupported(f"optimizer params {(body.optimizer_params or {}).get('type', '?')!r} (AdamParams only)")
    request_id = svc.submit(session, client, auth.team, body.model_id, body.seq_id, "optim_step",
                            body.adam_params.model_dump())
    return future(request_id, body.model_id)


def _write_meta(directory: Path, body: SaveWeights) -> None:
    """A named save's ttl_seconds and user_metadata (checked: a 400 before anything is written)."""
    try:
        ttl, metadata = checkpoints.check_ttl(body.ttl_seconds), checkpoints.check_metadata(body.user_metadata)
    except checkpoints.CheckpointError as err:
        raise svc.TinkerError(err.status_code, err.message) from err
    checkpoints.write_meta(directory, ttl_seconds=ttl, user_metadata=metadata)


@router.post("/save_weights")
def save_weights(body: SaveWeights, auth: Auth, session: SessionDep, client: RedisDep,
                 settings: SettingsDep) -> dict[str, Any]:
    job = svc.get_training_run(session, auth.team, body.model_id)
    name = svc.check_name(body.path)
    directory = svc.checkpoint_dir(settings.artifacts, job, "weights", name)
    if directory.exists() and not body.overwrite:
        raise svc.TinkerError(409, f"checkpoint {svc.tinker_path(job, 'weights', name)!r} exists (overwrite=True)")
    payload = {"dir": str(directory), "path": svc.tinker_path(job, "weights", name)}
    _write_meta(directory, body)
    return future(svc.submit(session, client, auth.team, body.model_id, body.seq_id, "save_state", payload),
                   body.model_id)


@router.post("/save_weights_for_sampler")
def save_weights_for_sampler(body: SaveWeights, auth: Auth, session: SessionDep, client: RedisDep,
                             settings: SettingsDep) -> dict[str, Any]:
    job = svc.get_training_run(session, auth.team, body.model_id)
    if body.kind != "snapshot":
        raise svc.unsupported(f"sampling client kind {body.kind!r} (snapshot only)")
    name = svc.check_name(body.path) if body.path is not None else f"{svc.EPHEMERAL}{svc.new_request_id(job)}"
    directory = svc.checkpoint_dir(settings.artifacts, job, "sampler_weights", name)
    path = svc.tinker_path(job, "sampler_weights", name)
    payload: dict[str, Any] = {"dir": str(directory), "path": path if body.path is not None else None}
    if body.path is not None:
        _write_meta(directory, body)
    else:  # save_weights_and_get_sampling_client: a sampler of these weights, no named checkpoint
        model = svc.model_info(session, job)
        payload["sampling_session_id"] = sampling.register_sampler(
            client, auth.team, base_model=model["model_name"], model_dir=model["model_data"]["tokenizer_id"],
            adapter_dir=str(directory), model_path=None, job_id=job.id, ephemeral=True)
    return future(svc.submit(session, client, auth.team, body.model_id, body.seq_id, "save_sampler", payload),
                   body.model_id)


@router.post("/load_weights")
def load_weights(body: LoadWeights, auth: Auth, session: SessionDep, client: RedisDep,
                 settings: SettingsDep) -> dict[str, Any]:
    source, kind, directory = svc.resolve_path(session, auth.team, settings.artifacts, body.path, _key(auth))
    if kind != "weights":
        raise svc.TinkerError(400, f"{body.path!r} is sampler weights; load_state takes a save_state path")
    load = {"dir": str(directory), "optimizer": body.optimizer, "path": body.path}
    if body.session_id is not None:  # create_training_client_from_state[_with_optimizer]: a new training run
        spec = source.spec
        lora = (spec.get("training") or {}).get("lora") or {}
        job, request_id = svc.create_training_run(
            session, client, auth.team, auth.user, session_id=body.session_id, model_seq_id=body.model_seq_id or 0,
            base_model=body.base_model or spec["model"], rank=int(lora.get("rank", 16)), seed=spec.get("seed"),
            load=load)
        job.created_by_key_id = auth.api_key.id if auth.api_key else None
        session.commit()
        from backend.services.live import wake_controller

        wake_controller(client)
        return future(request_id, job.name)
    if body.model_id is None:
        raise svc.TinkerError(400, "load_weights needs model_id (load_state) or session_id + model_seq_id")
    return future(svc.submit(session, client, auth.team, body.model_id, body.seq_id, "load_state", load),
                   body.model_id)


@router.post("/retrieve_future", response_model=None)
async def retrieve_future(body: RetrieveFuture, auth: Auth, session: SessionDep,
                          client: RedisDep) -> dict[str, Any] | Response:
    """The outcome, waiting up to RETRIEVE_WAIT_S for it (a long poll: the SDK re-asks at once on try_again). While
    it is pending only the result key is polled (from 2 ms apart, backing off to 50 ms); the full check (the job's
    state, a lost sample) runs every FULL_CHECK_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RETRIEVE_WAIT_S
    is_sample = sampling.is_sample_request(body.request_id)

    def full() -> svc.Outcome:
        if is_sample:
            return sampling.peek(client, auth.team, body.request_id)
        return svc.peek(session, client, auth.team, body.request_id)

    outcome = await run_in_threadpool(full)  # authorizes the request id (404: not the team's)
    checked, delay = loop.time(), 0.002
    while outcome.pending is not None and loop.time() < deadline:
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.05)
        raw = await run_in_threadpool(client.get, keys.tinker_result(body.request_id))
        if raw is not None:
            outcome = svc.stored_outcome(raw)
        elif loop.time() - checked > FULL_CHECK_S:
            outcome, checked = await run_in_threadpool(full), loop.time()
    if outcome.error is not None:
        return {"error": outcome.error, "category": outcome.category}
    if outcome.result is None:
        return {"type": "try_again", "request_id": body.request_id, "queue_state": outcome.pending}
    result = {name: value for name, value in outcome.result.items() if name != "timing"}
    if result.get("proto") == "forward_backward":
        return Response(wire.write_forward_backward_output(result["outputs"], result["metrics"]), media_type=PROTO)
    if result.get("proto") == "sample":
        return Response(wire.write_sample_response(result["sequences"], result.get("prompt_logprobs"),
                                                   result.get("topk_prompt_logprobs")), media_type=PROTO)
    return result


# -- REST: runs, checkpoints, samplers ---------------------------------------------------------------------------------
@router.get("/training_runs")
def training_runs(auth: Auth, session: SessionDep, settings: SettingsDep,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 20,
                  offset: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
    return svc.list_training_runs(session, auth.team, settings.artifacts, limit, offset)


@router.get("/training_runs/{run_id}")
def get_training_run(run_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    return svc.training_run(session, svc.get_training_run(session, auth.team, run_id), settings.artifacts)


@router.get("/training_runs/{run_id}/checkpoints")
def run_checkpoints(run_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    job = svc.get_training_run(session, auth.team, run_id)
    return {"checkpoints": svc.list_checkpoints(session, job, settings.artifacts)}


@router.post("/weights_info")
def weights_info(body: dict[str, Any], auth: Auth, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    job, _, _ = svc.resolve_path(session, auth.team, settings.artifacts, str(body.get("tinker_path", "")),
                                 _key(auth))
    info = svc.model_info(session, job)
    return {"base_model": info["model_name"], "is_lora": True, "lora_rank": info["lora_rank"]}


router.include_router(tinker_sampling.router)  # before the catch-all below
router.include_router(tinker_checkpoints.router)


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
def not_supported(rest: str, auth: Auth) -> None:
    """Every other Tinker call: a clear 400, never a 500 or a bare 404."""
    raise svc.unsupported(rest.split("?")[0][:200] or "/")
