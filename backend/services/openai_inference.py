"""OpenAI's models and chat-completions APIs on the platform's own models (routes in
backend/api/routes/openai_inference.py; docs/openai.md#chat-completions-and-models).

- A model id is a ready model the team registered (its `name`), a fine-tuning job's `fine_tuned_model`
  (`ft:<base>:<team>:<suffix>:<job id>`: the job's newest checkpoint, once it succeeded) or one of its checkpoints
  (`...:ckpt-step-<iteration>`), the ids backend/services/openai_compat.py gives them, or a job checkpoint's stable
  alias `job:<id>@best|@last|@<iteration>` (backend/services/model_aliases.py). Any other id, another team's
  included, is a 404.
- A checkpoint of a LoRA job is served as the base model plus the checkpoint's adapter (`adapter/`, PEFT layout); any
  other checkpoint as the model directory it is.
- Messages are rendered with the model's own chat template (backend/services/chat_preview.py: the template the
  runtime renders with, without torch), sampled on the generation pool (backend/services/inference.py) and decoded
  with the model's tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Checkpoint, Deployment, Job, JobEvent, Model, Team
from backend.services import model_aliases
from backend.services.chat_preview import ChatRenderer
from backend.services.errors import InvalidInput
from backend.services.inference import SampleRequest
from backend.services.models import job_model
from backend.services.openai_compat import MARKER, OpenAIError, model_name, unix
from contract.settings import get_settings

ADAPTER_DIR = "adapter"  # inside a checkpoint (workers/models/lora.py ADAPTER_DIR)
CHECKPOINT = re.compile(r"^(?P<name>ft:.+:(?P<job>\d{1,10}))(?::ckpt-step-(?P<step>\d{1,10}))?$")
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS = 16384
MAX_N = 16
# parameters OpenAI has that this platform does not serve: named in a 400 rather than ignored
UNSUPPORTED = {
    "tools": "tool calling", "tool_choice": "tool calling", "functions": "function calling",
    "function_call": "function calling", "parallel_tool_calls": "tool calling",
    "response_format": "structured outputs (JSON mode / schemas)", "audio": "audio output",
    "modalities": "modalities other than text", "prediction": "predicted outputs",
    "web_search_options": "web search", "logit_bias": "logit bias", "reasoning_effort": "reasoning effort",
    "verbosity": "verbosity", "prompt_cache_key": "prompt caching",
}


# -- models ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """What a model id runs: the directory the engine loads, the adapter over it, the tokenizer's directory."""

    id: str
    model_dir: str
    adapter_dir: str | None
    created: int | None
    deployment_id: int | None = None  # served by a deployment's replicas (backend/services/deployments.py)
    adapter: str | None = None  # the deployment's adapter it generates with (None: its base model)


def _model_object(model_id: str, created: int | None, team: Team) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created or 0, "owned_by": f"org-{team.id}"}


def _facts(session: Session, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    if not job_ids:
        return {}
    rows = session.execute(select(JobEvent.job_id, JobEvent.data).where(JobEvent.job_id.in_(job_ids),
                                                                         JobEvent.kind == MARKER))
    return {job_id: dict(data or {}) for job_id, data in rows}


def list_models(session: Session, team: Team) -> dict[str, Any]:
    """The team's ready models, then every job's fine-tuned model (succeeded jobs) and checkpoints, newest first, with
    `job:<id>@best` beside the checkpoint marked best."""
    newest: dict[str, Model] = {}  # a name serves its newest ready version
    for model in session.scalars(select(Model).where(Model.team_id == team.id, Model.state == "ready")
                                 .order_by(Model.id, Model.version)):
        newest[model.name] = model
    out = [_model_object(model.name, unix(model.created_at), team)
           for model in sorted(newest.values(), key=lambda m: m.id)]
    rows = session.execute(select(Job, Checkpoint).join(Checkpoint, Checkpoint.job_id == Job.id)
                           .where(Job.team_id == team.id).order_by(Job.id.desc(), Checkpoint.iteration.desc())).all()
    facts = _facts(session, sorted({job.id for job, _ in rows}))
    named: set[int] = set()
    for job, checkpoint in rows:
        name = model_name(job, team, facts.get(job.id, {}))
        if job.status == JobStatus.succeeded and job.id not in named:
            named.add(job.id)
            out.append(_model_object(name, unix(job.finished_at or checkpoint.created_at), team))
        out.append(_model_object(f"{name}:ckpt-step-{checkpoint.iteration}", unix(checkpoint.created_at), team))
        if checkpoint.best:  # its stable alias (backend/services/model_aliases.py)
            out.append(_model_object(f"job:{job.id}@best", unix(checkpoint.created_at), team))
    out += [_model_object(row.name, unix(row.created_at), team) for row in session.scalars(
        select(Deployment).where(Deployment.team_id == team.id).order_by(Deployment.id))]
    return {"object": "list", "data": out}


def _not_found(model_id: str) -> OpenAIError:
    return OpenAIError(f"The model '{model_id[:200]}' does not exist or you do not have access to it.",
                       param="model", code="model_not_found", status_code=404)


def resolve(session: Session, team: Team, model_id: str, key_id: int | None = None,
            artifacts: Path | None = None, *, deployed: bool = True) -> Served:
    """The team's model `model_id` (404 otherwise, whoever owns it); a `tinker://` sampler path as the Tinker API
    resolves it for the calling key `key_id`, under the API's `artifacts` directory (docs/tinker.md)."""
    if model_id.startswith("tinker://"):
        return _served_tinker(session, team, model_id, key_id, artifacts or get_settings().artifacts)
    served = _served_deployment(session, team, model_id) if deployed else None  # False: what the id itself names
    if served is not None:
        return served
    if model_aliases.is_alias(model_id):  # job:<id>@best | @last | @<iteration> (backend/services/model_aliases.py)
        found = model_aliases.resolve_alias(session, team, model_id)
        if found is None:
            raise _not_found(model_id)
        return _served_checkpoint(session, team, model_id, *found)
    match = CHECKPOINT.match(model_id)
    if match is None:
        model = session.scalar(select(Model).where(Model.team_id == team.id, Model.name == model_id,
                                                   Model.state == "ready").order_by(Model.version.desc()).limit(1))
        if model is None:
            raise _not_found(model_id)
        return Served(model_id, model.path, None, unix(model.created_at))
    job = session.scalar(select(Job).where(Job.id == int(match["job"]), Job.team_id == team.id))
    if job is None or model_name(job, team, _facts(session, [job.id]).get(job.id, {})) != match["name"]:
        raise _not_found(model_id)
    query = select(Checkpoint).where(Checkpoint.job_id == job.id)
    if match["step"] is not None:
        query = query.where(Checkpoint.iteration == int(match["step"]))
    elif job.status != JobStatus.succeeded:
        raise _not_found(model_id)  # the fine-tuned model exists once the job succeeded (its checkpoints before)
    checkpoint = session.scalar(query.order_by(Checkpoint.iteration.desc()).limit(1))
    if checkpoint is None:
        raise _not_found(model_id)
    return _served_checkpoint(session, team, model_id, job, checkpoint)


def _served_deployment(session: Session, team: Team, model_id: str) -> Served | None:
    """A deployment's name (its first adapter, or the base model) or one of its adapter ids (the first deployment
    listing it): its replicas serve it (backend/services/deployments.py; None: no deployment names it)."""
    rows = list(session.scalars(select(Deployment).where(Deployment.team_id == team.id).order_by(Deployment.id)))
    named = next((r for r in rows if r.name == model_id), None)
    listing = next((r for r in rows if model_id in r.adapters), None)
    if named is not None:
        row, adapter = named, (named.adapters[0] if named.adapters else None)
    elif listing is not None:
        row, adapter = listing, model_id
    else:
        return None
    base = session.scalar(select(Model).where(Model.team_id == team.id, Model.name == row.base_model,
                                              Model.state == "ready").order_by(Model.id.desc()).limit(1))
    if base is None:
        raise _not_found(model_id)
    return Served(model_id, base.path, None, unix(row.created_at), deployment_id=row.id, adapter=adapter)


def _served_tinker(session: Session, team: Team, model_id: str, key_id: int | None, artifacts: Path) -> Served:
    """`tinker://<run>/sampler_weights/<name>`: the run's base model with that adapter (Tinker's OpenAI-compatible
    endpoint serves these); another team's, an expired or an unpublished other key's path is a 404."""
    from backend.services import tinker as tinker_service  # the Tinker API's path rules, one place

    try:
        job, kind, directory = tinker_service.resolve_path(session, team, artifacts, model_id, key_id)
    except tinker_service.TinkerError as err:
        if err.status_code == 404:
            raise _not_found(model_id) from err
        raise OpenAIError(err.message, param="model", code="invalid_model", status_code=400) from err
    if kind != "sampler_weights":
        raise OpenAIError(f"{model_id[:200]!r} is a save_state path; serve a save_weights_for_sampler path "
                          "(tinker://<run>/sampler_weights/<name>)", param="model", code="invalid_model",
                          status_code=400)
    base = tinker_service.model_info(session, job)["model_data"]["tokenizer_id"]
    if base is None:
        raise _not_found(model_id)  # its base model was deleted
    return Served(model_id, str(base), str(directory), int(directory.stat().st_mtime))


def _served_checkpoint(session: Session, team: Team, model_id: str, job: Job, checkpoint: Checkpoint) -> Served:
    adapter = Path(checkpoint.path) / ADAPTER_DIR
    lora = (job.spec.get("training") or {}).get("lora")
    if lora and adapter.is_dir():
        base = job_model(session, job)  # the version it trained on
        if base is not None and base.state == "ready":  # base + adapter; else the merged model the checkpoint holds
            return Served(model_id, base.path, str(adapter), unix(checkpoint.created_at))
    return Served(model_id, checkpoint.path, None, unix(checkpoint.created_at))


def model_object(served: Served, team: Team) -> dict[str, Any]:
    return _model_object(served.id, served.created, team)


# -- chat completions ------------------------------------------------------------------------------------------------
class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    include_obfuscation: bool | None = None


class ChatCompletionCreate(BaseModel):
    """The request body; fields OpenAI has but the platform does not serve are refused by `check` (extra: allow, so
    each is named)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=400)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=1024)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = Field(None, max_length=256)
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = Field(None, max_length=32)
    safety_identifier: str | None = Field(None, max_length=256)


def parse(body: Any) -> ChatCompletionCreate:
    """The request (400 naming the first bad or unsupported parameter)."""
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object")
    try:
        request = ChatCompletionCreate.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OpenAIError(f"{where}: {error['msg']}" if where else str(error["msg"]), param=where or None) from None
    check(request)
    return request


def check(request: ChatCompletionCreate) -> None:
    for name in request.model_extra or {}:
        what = UNSUPPORTED.get(name)
        detail = f"{what} is not supported by this platform" if what else "unknown parameter"
        raise OpenAIError(f"{name}: {detail}", param=name, code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(request, name) not in (None, 0, 0.0):
            raise OpenAIError(f"{name} is not supported by this platform (only 0)", param=name,
                              code="unsupported_parameter")
    if request.top_logprobs and request.stream:
        raise OpenAIError("top_logprobs is not supported with stream: true (the alternatives arrive with each "
                          "choice's end)", param="top_logprobs", code="unsupported_parameter")
    if request.top_logprobs is not None and not request.logprobs:
        raise OpenAIError("top_logprobs needs logprobs: true", param="top_logprobs")
    if request.stream_options is not None and not request.stream:
        raise OpenAIError("stream_options needs stream: true", param="stream_options")
    if request.max_tokens is not None and request.max_completion_tokens is not None \
            and request.max_tokens != request.max_completion_tokens:
        raise OpenAIError("give max_completion_tokens or max_tokens, not both", param="max_tokens")
    if max_tokens(request) > MAX_TOKENS:
        raise OpenAIError(f"max_completion_tokens must be at most {MAX_TOKENS}", param="max_completion_tokens")
    stops = stop_strings(request)
    if len(stops) > 4 or any(not s for s in stops):
        raise OpenAIError("stop: up to 4 non-empty strings", param="stop")
    messages(request)


def max_tokens(request: ChatCompletionCreate) -> int:
    return request.max_completion_tokens or request.max_tokens or DEFAULT_MAX_TOKENS


def stop_strings(request: ChatCompletionCreate) -> list[str]:
    return [request.stop] if isinstance(request.stop, str) else list(request.stop or [])


ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for index, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise OpenAIError(f"{where}[{index}]: only text content parts are supported (got {kind!r})",
                                  param=f"{where}[{index}]", code="unsupported_parameter")
            parts.append(part["text"])
        return "".join(parts)
    raise OpenAIError(f"{where} must be a string or a list of text parts", param=where)


def messages(request: ChatCompletionCreate) -> list[dict[str, str]]:
    """The conversation as the chat template takes it: {role, content} with text content (developer -> system)."""
    out = []
    for index, message in enumerate(request.messages):
        where = f"messages[{index}]"
        role = message.get("role")
        if role in ("tool", "function"):
            raise OpenAIError(f"{where}: {role} messages are not supported (no tool calling)", param=f"{where}.role",
                              code="unsupported_parameter")
        if role not in ROLES:
            raise OpenAIError(f"{where}.role must be one of {sorted(ROLES)} (got {str(role)[:40]!r})",
                              param=f"{where}.role")
        for key in message:
            if key not in ("role", "content", "name"):
                raise OpenAIError(f"{where}.{key} is not supported", param=f"{where}.{key}",
                                  code="unsupported_parameter")
        if message.get("content") is None:
            raise OpenAIError(f"{where}.content is required", param=f"{where}.content")
        out.append({"role": ROLES[role], "content": _text(message["content"], f"{where}.content")})
    return out


@dataclass
class Prepared:
    served: Served
    renderer: ChatRenderer
    prompt_ids: list[int]
    sample: SampleRequest


def prepare(request: ChatCompletionCreate, served: Served) -> Prepared:
    """Render the conversation with the model's chat template; the sample request to run."""
    tokenizer_dir = Path(served.model_dir)
    try:
        renderer = ChatRenderer.for_model(tokenizer_dir)
        text, _ = renderer.render(messages(request))
    except InvalidInput as exc:
        raise OpenAIError(f"model {served.id}: {exc.detail}", param="model") from None
    ids = list(renderer.tokenizer.encode(text, add_special_tokens=False).ids)
    if not ids:
        raise OpenAIError("the rendered conversation is empty", param="messages")
    temperature = 1.0 if request.temperature is None else request.temperature
    sample = SampleRequest(prompt_ids=ids, max_tokens=max_tokens(request), temperature=temperature,
                           top_p=1.0 if request.top_p is None else request.top_p, n=request.n or 1,
                           seed=request.seed, stop=stop_strings(request), logprobs=bool(request.logprobs),
                           topk_logprobs=request.top_logprobs or 0)
    return Prepared(served, renderer, ids, sample)


def decode(renderer: ChatRenderer, ids: list[int]) -> str:
    return str(renderer.tokenizer.decode(ids, skip_special_tokens=True))


def cut_at_stop(text: str, stops: list[str]) -> str:
    """The engine's rule (workers/generation/engines/hf_batch.py): the text ends before the first stop string."""
    hits = [text.find(s) for s in stops if s and s in text]
    return text[: min(hits)] if hits else text


def safe_prefix(text: str, stops: list[str]) -> str:
    """What may be streamed of an unfinished sample's text: not a trailing partial character, nor a tail that could
    still become a stop string (so the chunks add up to the final, cut text)."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    text = text[:end]
    hold = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:size]):
                hold = max(hold, size)
                break
    return text[: len(text) - hold]


def token_logprobs(renderer: ChatRenderer, ids: list[int], values: list[float],
                   top: list[Any] | None = None) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content`: each token's text, logprob and bytes, and with `top` (the instance's top-k per
    step, [ids, logprobs]) its `top_logprobs` alternatives (else [])."""
    def entry(token: int, value: float) -> dict[str, Any]:
        piece = renderer.tokenizer.decode([token], skip_special_tokens=False)
        return {"token": piece, "logprob": value, "bytes": list(piece.encode("utf-8"))}

    out = []
    for index, (token, value) in enumerate(zip(ids, values, strict=False)):
        step = top[index] if top is not None and index < len(top) else None
        alternatives = [entry(i, v) for i, v in zip(step[0], step[1], strict=True)] if step else []
        out.append({**entry(token, value), "top_logprobs": alternatives})
    return out
