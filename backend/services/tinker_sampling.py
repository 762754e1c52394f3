"""`SamplingClient.sample` and `compute_logprobs` of the Tinker API on the platform's on-demand inference service
(docs/tinker.md; routes: backend/api/routes/tinker_sampling.py).

    sampler = register_sampler(...)           # create_sampling_session / save_weights_and_get_sampling_client:
                                              # a Redis record {team, base model dir, adapter dir (PEFT) or None}
    plan = read_request(body)                 # the SDK's JSON SampleRequest -> inference.SampleRequest (400s here)
    check_vocabulary(plan, sampler)           # every token id inside the served model's vocabulary (400 naming it)
    request_id = start(client, team, sampler, plan)     # sampled in a thread of the API process
    outcome = peek(client, team, request_id)            # retrieve_future: try_again, the result, or a failure

Sampling goes through backend/services/inference.py: the sampler's base model + adapter served by an instance on
the generation pool (continuous batching); `compute_logprobs` is a sample of one token with prompt logprobs, which
that instance computes with one forward pass of the same model over the prompt. A result is stored under
`keys.tinker_result(request_id)` as `{"proto": "sample", ...}` (retrieve_future answers it as the SDK's
SampleResponse protobuf). Request ids are `sample.<team>.<hex>`: another team's is a 404. While a sample runs its
pending marker lives (TTL: its timeout + a margin); a marker gone without a result (the API process died) fails
the future with a retryable (`server`) error. Each training run's newest ephemeral sampler retires the previous
one's inference instance (it stops once idle instead of holding a generation slot for its idle timeout).
"""

from __future__ import annotations

import json
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import redis

from backend.db.models import Team
from backend.services import inference
from backend.services import tinker_futures as futures
from backend.services.tinker import Outcome, TinkerError, not_found, store_result, stored_outcome, unsupported
from contract import keys

log = logging.getLogger(__name__)
PREFIX = "sample."
TIMEOUT_S = 300.0  # one sample call, including an instance's start (a free generation slot, loading the model)
PENDING_MARGIN_S = 60
SAMPLER_TTL_S = 7 * 86400
MAX_SAMPLES = 128
MAX_TOPK = 64  # topk_prompt_logprobs / topk_sample_logprobs
NO_LIMIT = 1 << 30  # max_tokens None: until EOS, a stop, or the model's context
_executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tinker-sample")


# -- samplers -------------------------------------------------------------------------------------------------------
def sampler_key(sampler_id: str) -> str:
    return f"streamrl:tinker:sampler:{sampler_id}"


def _latest_key(job_id: int) -> str:
    return f"streamrl:tinker:latest_sampler:{job_id}"


def register_sampler(client: redis.Redis, team: Team, *, base_model: str, model_dir: str, adapter_dir: str | None,
                     model_path: str | None, job_id: int | None, ephemeral: bool = False) -> str:
    """A sampler record; an `ephemeral` one (save_weights_and_get_sampling_client) supersedes its run's previous
    ephemeral sampler, whose inference instance is retired."""
    sampler_id = f"{team.id}-{secrets.token_hex(8)}"
    record = {"team_id": team.id, "base_model": base_model, "model_dir": model_dir, "adapter_dir": adapter_dir,
              "model_path": model_path, "job_id": job_id}
    client.set(sampler_key(sampler_id), json.dumps(record), ex=SAMPLER_TTL_S)
    if ephemeral and job_id is not None:
        previous: Any = client.getset(_latest_key(job_id), json.dumps([model_dir, adapter_dir]))
        client.expire(_latest_key(job_id), SAMPLER_TTL_S)
        if previous is not None:
            inference.retire(client, *json.loads(previous))
    return sampler_id


def get_sampler(client: redis.Redis, team: Team, sampler_id: str) -> dict[str, Any]:
    raw = client.get(sampler_key(sampler_id))
    record = json.loads(raw) if raw else None
    if record is None or record["team_id"] != team.id:
        raise not_found("sampler", sampler_id)
    return record


# -- requests -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    request: inference.SampleRequest
    last_n: int | None  # prompt_logprobs_last_n: earlier prompt logprobs are None


def _tokens(prompt: Any) -> list[int]:
    chunks = prompt.get("chunks") if isinstance(prompt, dict) else None
    if not isinstance(chunks, list) or not chunks:
        raise TinkerError(400, "prompt.chunks must be a non-empty list")
    tokens: list[int] = []
    for index, chunk in enumerate(chunks):
        kind = chunk.get("type", "encoded_text") if isinstance(chunk, dict) else None
        if kind != "encoded_text":
            raise unsupported(f"{kind} prompt chunks (token chunks only)")
        ids = chunk.get("tokens")
        if not isinstance(ids, list):
            raise TinkerError(400, f"prompt.chunks[{index}].tokens must be a list of token ids")
        for position, token in enumerate(ids):
            if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < 1 << 31:
                raise TinkerError(400, f"prompt.chunks[{index}].tokens[{position}] = {str(token)[:40]} is not a "
                                       "token id (token ids are non-negative integers below 2^31)")
        tokens.extend(ids)
    if not tokens:
        raise TinkerError(400, "the prompt has no tokens")
    return tokens


def _number(params: dict[str, Any], name: str, default: float) -> float:
    value = params.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TinkerError(400, f"sampling_params.{name} must be a number, not {value!r}")
    return float(value)


def _stops(stop: Any) -> tuple[list[str], list[int]]:
    """Tinker's `stop`: None (EOS only), a string, strings, or token ids."""
    if stop is None:
        return [], []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list):
        raise TinkerError(400, "sampling_params.stop must be a string, a list of strings or a list of token ids")
    if not stop:
        raise unsupported("sampling_params.stop=[] (sampling past EOS)")
    if all(isinstance(s, str) and s for s in stop):
        return list(stop), []
    if all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in stop):
        return [], list(stop)
    raise TinkerError(400, "sampling_params.stop must be non-empty strings or token ids, not a mix")


def _topk(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOPK:
        raise TinkerError(400, f"{name} must be an integer from 0 to {MAX_TOPK}, not {str(value)[:40]}")
    return value


def read_request(body: Any) -> Plan:
    """The SDK's JSON SampleRequest as an inference request; what this server does not do is a 400."""
    if not isinstance(body, dict):
        raise TinkerError(400, "the body must be a JSON SampleRequest")
    if body.get("prompt_alt_tokens_k"):
        raise unsupported("prompt_alt_tokens_k")
    topk_prompt, topk_sample = _topk(body, "topk_prompt_logprobs"), _topk(body, "topk_sample_logprobs")
    for name in ("target_prompt_logprobs", "record_stability_info"):
        if body.get(name):
            raise unsupported(name)
    num_samples = body.get("num_samples", 1)
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or not 1 <= num_samples <= MAX_SAMPLES:
        raise TinkerError(400, f"num_samples must be between 1 and {MAX_SAMPLES}, not {num_samples!r}")
    params = body.get("sampling_params")
    if not isinstance(params, dict):
        raise TinkerError(400, "sampling_params is required")
    tokens = _tokens(body.get("prompt"))
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise TinkerError(400, f"sampling_params.max_tokens must be 1 or more, not {max_tokens!r}")
    temperature, top_p = _number(params, "temperature", 1.0), _number(params, "top_p", 1.0)
    if temperature < 0 or not 0 < top_p <= 1:
        raise TinkerError(400, "sampling_params need temperature >= 0 and 0 < top_p <= 1")
    if _number(params, "top_k", -1) not in (-1, 0):
        raise unsupported("sampling_params.top_k (only -1: no limit)")
    seed = params.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 1 << 63):
        raise TinkerError(400, f"sampling_params.seed must be a non-negative integer, not {seed!r}")
    stop, stop_ids = _stops(params.get("stop"))
    want_prompt = bool(body.get("prompt_logprobs"))
    last_n = body.get("prompt_logprobs_last_n")
    if last_n is not None:
        if not want_prompt and not topk_prompt:
            raise TinkerError(400, "prompt_logprobs_last_n needs prompt_logprobs or topk_prompt_logprobs")
        if not isinstance(last_n, int) or isinstance(last_n, bool) or not 1 <= last_n <= len(tokens) - 1:
            raise TinkerError(400, f"prompt_logprobs_last_n must be between 1 and {len(tokens) - 1} (the prompt's "
                                   f"length - 1), not {last_n!r}")
    request = inference.SampleRequest(
        prompt_ids=tokens, max_tokens=max_tokens or NO_LIMIT, temperature=temperature, top_p=top_p, n=num_samples,
        seed=seed, stop=stop, stop_token_ids=stop_ids, logprobs=True, prompt_logprobs=want_prompt,
        topk_prompt_logprobs=topk_prompt, topk_logprobs=topk_sample)
    return Plan(request=request, last_n=last_n)


@lru_cache(maxsize=256)
def _vocab_size(config_path: str, mtime_ns: int) -> int | None:
    try:
        config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    nested = config.get("text_config") if isinstance(config, dict) else None
    for source in (nested, config):
        value = source.get("vocab_size") if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def vocab_size(model_dir: str) -> int | None:
    """The model's vocabulary size (its embedding rows: config.json `vocab_size`), None when it cannot be read."""
    path = Path(model_dir) / "config.json"
    try:
        mtime_ns = path.stat().st_mtime_ns
    except OSError:
        return None
    return _vocab_size(str(path), mtime_ns)


def check_vocabulary(plan: Plan, sampler: dict[str, Any]) -> None:
    """A 400 naming the first prompt token or stop token id outside the served model's vocabulary: such an id would
    reach the shared inference instance (the instance refuses it too, alone, should the config not say)."""
    vocab = vocab_size(str(sampler["model_dir"]))
    if vocab is None:
        return
    for position, token in enumerate(plan.request.prompt_ids):
        if token >= vocab:
            raise TinkerError(400, f"prompt token {position} is {token}, outside the model's vocabulary (token ids "
                                   f"0 to {vocab - 1})")
    for position, token in enumerate(plan.request.stop_token_ids):
        if token >= vocab:
            raise TinkerError(400, f"sampling_params.stop[{position}] is token {token}, outside the model's "
                                   f"vocabulary (token ids 0 to {vocab - 1})")


# -- running and retrieving -----------------------------------------------------------------------------------------
def pending_key(request_id: str) -> str:
    return f"streamrl:tinker:sample_pending:{request_id}"


def _last_n(values: list[Any] | None, last_n: int | None) -> list[Any] | None:
    """prompt_logprobs_last_n: entries before the last n are None."""
    if values is None or last_n is None:
        return values
    return [None] * (len(values) - last_n) + values[-last_n:]


def _response(results: list[inference.SampleResult], plan: Plan) -> dict[str, Any]:
    prompt = results[0].prompt_logprobs if plan.request.prompt_logprobs else None
    topk_prompt = results[0].topk_prompt_logprobs if plan.request.topk_prompt_logprobs else None
    return {"proto": "sample", "prompt_logprobs": _last_n(prompt, plan.last_n),
            "topk_prompt_logprobs": _last_n(topk_prompt, plan.last_n),
            "sequences": [{"tokens": r.token_ids, "logprobs": r.logprobs, "stop_reason": r.finish_reason,
                           "topk_logprobs": r.topk_logprobs if plan.request.topk_logprobs else None}
                          for r in results]}


def _run(client: redis.Redis, team_id: int, sampler: dict[str, Any], plan: Plan, request_id: str,
         meter: inference.Meter | None = None, target: futures.Target | None = None) -> None:
    state = "failed"
    try:
        results = inference.sample(client, team_id=team_id, model_dir=sampler["model_dir"],
                                   adapter_dir=sampler["adapter_dir"], requests=[plan.request], timeout_s=TIMEOUT_S,
                                   meter=meter)
        store_result(client, request_id, _response(results[0], plan))
        state = "finished"
    except inference.InferenceError as err:
        category = "user" if err.code == "invalid_request" else "server"
        store_result(client, request_id, {"error": f"sampling failed ({err.code}): {err.message}",
                                          "category": category})
    except Exception as err:  # a stored failure, never a future that hangs
        log.exception("tinker sample %s failed", request_id)
        store_result(client, request_id, {"error": f"sampling failed: {type(err).__name__}: {err}",
                                          "category": "server"})
    finally:
        try:
            if target is not None:  # after the result is stored: a poller told "finished" finds it
                futures.report(client, target, request_id, state)
        finally:
            client.delete(pending_key(request_id))


def start(client: redis.Redis, team: Team, sampler: dict[str, Any], plan: Plan,
          meter: inference.Meter | None = None, target: futures.Target | None = None) -> str:
    """Sample in the background; the request id for retrieve_future. `meter` records the call's usage; `target`
    (the sampling session and clone of the SDK's seq id) gets the request's completion (retrieve_futures)."""
    request_id = f"{PREFIX}{team.id}.{secrets.token_hex(8)}"
    client.set(pending_key(request_id), "1", ex=int(TIMEOUT_S + PENDING_MARGIN_S))
    if target is not None:
        futures.track(client, target, request_id)
    _executor.submit(_run, client, team.id, sampler, plan, request_id, meter, target)
    return request_id


def is_sample_request(request_id: str) -> bool:
    return request_id.startswith(PREFIX)


def peek(client: redis.Redis, team: Team, request_id: str) -> Outcome:
    if request_id.split(".")[1:2] != [str(team.id)]:
        raise not_found("request", request_id)
    raw = client.get(keys.tinker_result(request_id))
    if raw is not None:
        return stored_outcome(raw)
    if client.exists(pending_key(request_id)):
        return Outcome(pending="active")
    if client.exists(keys.tinker_result(request_id)):  # finished between the two reads
        return peek(client, team, request_id)
    return Outcome(error=f"sample request {request_id!r} was lost (the API process serving it stopped, or its "
                         "result expired); sample again", category="server")
