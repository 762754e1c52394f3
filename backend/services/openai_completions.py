"""OpenAI's legacy text completions (`POST /openai/v1/completions`) on the on-demand inference service: a prompt
(text, or token ids) continued by the served model, as Tinker's OpenAI-compatible endpoint offers for `tinker://`
sampler paths (docs/tinker.md) and for every model `/chat/completions` serves (docs/openai.md).

    request = parse(body)                       # 400 naming the first bad or unsupported parameter
    plan = prepare(request, served)             # prompt ids (the model's tokenizer, no special tokens added)
    response(request, plan, results, id, created)   # the `text_completion` object

`logprobs: k` (0-5, OpenAI's limit) gives each generated token's logprob and, for k > 0, its k most likely
alternatives at that step (`topk_logprobs` of the inference instance: the distribution the step sampled from).
Not served (a 400 naming each): `stream`, `echo`, `suffix`, `best_of` other than 1, penalties other than 0,
`logit_bias`, several prompts at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.services.chat_preview import ChatRenderer
from backend.services.errors import InvalidInput
from backend.services.inference import SampleRequest, SampleResult
from backend.services.openai_compat import OpenAIError
from backend.services.openai_inference import MAX_N, MAX_TOKENS, Served, cut_at_stop

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
MAX_LOGPROBS = 5


class CompletionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=400)
    prompt: str | list[int] | list[str]
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    stream: bool | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    user: str | None = Field(None, max_length=256)


def parse(body: Any) -> CompletionCreate:
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object")
    try:
        request = CompletionCreate.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"][:1])
        code = "unsupported_parameter" if error["type"] == "extra_forbidden" else None
        raise OpenAIError(f"{where}: {error['msg']}" if where else str(error["msg"]), param=where or None,
                          code=code) from None
    refused = {"stream": bool(request.stream), "echo": bool(request.echo), "suffix": request.suffix is not None,
               "best_of": request.best_of not in (None, 1),
               "presence_penalty": request.presence_penalty not in (None, 0, 0.0),
               "frequency_penalty": request.frequency_penalty not in (None, 0, 0.0)}
    for name, is_set in refused.items():
        if is_set:
            raise OpenAIError(f"{name} is not supported on /completions by this platform", param=name,
                              code="unsupported_parameter")
    several = isinstance(request.prompt, list) and len(request.prompt) > 1
    if several and all(isinstance(p, str) for p in request.prompt):
        raise OpenAIError("prompt: one prompt per request (a list of one string, a string or token ids)",
                              param="prompt", code="unsupported_parameter")
    stops = stop_strings(request)
    if len(stops) > 4 or any(not s for s in stops):
        raise OpenAIError("stop: up to 4 non-empty strings", param="stop")
    return request


def stop_strings(request: CompletionCreate) -> list[str]:
    return [request.stop] if isinstance(request.stop, str) else list(request.stop or [])


@dataclass
class Plan:
    tokenizer: Any
    prompt_ids: list[int]
    sample: SampleRequest


def prepare(request: CompletionCreate, served: Served) -> Plan:
    try:
        tokenizer = ChatRenderer.for_model(Path(served.model_dir)).tokenizer
    except InvalidInput as exc:
        raise OpenAIError(f"model {served.id}: {exc.detail}", param="model") from None
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids: list[int] = list(tokenizer.encode(prompt, add_special_tokens=False).ids)
    else:
        ids = [int(i) for i in prompt if isinstance(i, int)]
        if len(ids) != len(prompt) or any(i < 0 for i in ids):
            raise OpenAIError("prompt: token ids are non-negative integers", param="prompt")
    if not ids:
        raise OpenAIError("prompt is empty", param="prompt")
    sample = SampleRequest(
        prompt_ids=ids, max_tokens=request.max_tokens or DEFAULT_MAX_TOKENS,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p, n=request.n or 1, seed=request.seed,
        stop=stop_strings(request), logprobs=request.logprobs is not None, topk_logprobs=request.logprobs or 0)
    return Plan(tokenizer, ids, sample)


def _logprobs(plan: Plan, result: SampleResult, text: str) -> dict[str, Any]:
    """OpenAI's completion logprobs: tokens, token_logprobs, top_logprobs (k alternatives per step) and
    text_offset (each token's start in the choice's text)."""
    pieces = [str(plan.tokenizer.decode([t], skip_special_tokens=False)) for t in result.token_ids]
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(min(at, len(text)))
        at += len(piece)
    tops: list[dict[str, float] | None] | None = None
    if plan.sample.topk_logprobs and result.topk_logprobs is not None:
        tops = [None if entry is None else {str(plan.tokenizer.decode([i], skip_special_tokens=False)): v
                                            for i, v in zip(entry[0], entry[1], strict=True)}
                for entry in result.topk_logprobs]
    return {"tokens": pieces, "token_logprobs": list(result.logprobs or []), "top_logprobs": tops,
            "text_offset": offsets}


def response(request: CompletionCreate, plan: Plan, results: list[SampleResult], completion_id: str,
             created: int) -> dict[str, Any]:
    choices, completion_tokens = [], 0
    for index, result in enumerate(results):
        completion_tokens += len(result.token_ids)
        text = cut_at_stop(str(plan.tokenizer.decode(result.token_ids, skip_special_tokens=True)), plan.sample.stop)
        choices.append({"index": index, "text": text, "finish_reason": result.finish_reason,
                        "logprobs": _logprobs(plan, result, text) if request.logprobs is not None else None})
    prompt_tokens = len(plan.prompt_ids)
    return {"id": completion_id, "object": "text_completion", "created": created, "model": request.model,
            "choices": choices, "system_fingerprint": None,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
