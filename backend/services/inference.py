"""On-demand inference on the generation pool: the control plane's side (torch-free). Called by the OpenAI
chat-completions route (backend/api/routes/openai_inference.py) and by the Tinker-compatible API's `sample`.

    results = sample(client, team_id=team.id, model_dir=path, adapter_dir=None,
                     requests=[SampleRequest(prompt_ids=ids, max_tokens=16, temperature=0.0, n=2)])
    results[0][1].token_ids, results[0][1].logprobs, results[0][1].finish_reason   # request 0, sample 1
    for request, index, new_ids, finish in sample_stream(client, ...same...):     # tokens as they are generated
        ...

Interface (stable: other APIs build on it):
- `SampleRequest`: one prompt (token ids, already rendered) and how to sample `n` completions of it. `seed`: sample k
  uses `seed + k`; `stop`: strings that end a sample (the text is cut before them, the token that completed one is
  the last token); `stop_token_ids`: token ids that end a sample (kept as its last token, like EOS); `logprobs`: the
  behaviour logprob of each sampled token (temperature-scaled; workers/generation/engines/sampling.py);
  `prompt_logprobs`: also log p(prompt[i] | prompt[:i]) under the served model (None for the first token).
- `SampleResult`: a sample's token ids (EOS or stop token included when one ended it), logprobs (None unless asked),
  finish reason `stop` (EOS, stop string or stop token) or `length` (max_tokens or the model's context), and the
  request's prompt logprobs when it asked for them (the same list on each of its samples).
- `sample(client, *, team_id, model_dir, adapter_dir, requests, timeout_s=120)` blocks until every sample is done and
  returns them per request, in order; `sample_stream(...)` yields `(request index, sample index, new token ids, finish
  reason or None)` as tokens arrive (the finish reason on the sample's last item); `sample_deltas(...)` is the same
  with logprobs (`Delta`). `retire(client, model_dir, adapter_dir)`: that key's instance stops as soon as it is idle
  (superseded weights), not after its idle timeout; a later request for the key starts it again. Call them from sync
  code (FastAPI runs sync endpoints in its threadpool).
- Usage: `meter` (optional, on every call) hears once, when the call ends (done, failed or abandoned), of
  `CallUsage(device_seconds, tokens_generated)`: its requests' shares of the instance's engine steps (each step's time
  split equally among the rows in it; the instance reports them in its `done` events) and the tokens it sampled.
- Errors: `InferenceError` with `code`: `no_workers` (no generation worker registered), `load_failed` (the model or
  adapter could not be loaded: the message says why), `timeout` (says what was awaited: a free generation slot, the
  model loading, or generation), `instance_lost` (the instance died while serving the request), `invalid_request`
  (the instance refused a request, e.g. a prompt longer than the model's context). Nothing waits forever.

How it works. An instance serves one key (model_dir, adapter_dir) (`inference_key`): it is the Celery task
`generation.run_inference(key, model_dir, adapter_dir)` (contract/tasks.py `RUN_INFERENCE`, on the `generation`
queue like the jobs' instances; workers/runtime/inference.py), started by the first request that finds none running
and stopped by itself after `STREAMRL_INFERENCE_IDLE_S` seconds without requests. Redis keys (contract/keys.py):
`inference_requests(key)` a list of pending requests (JSON, carrying the team id, the sampling parameters, a deadline
and a reply key), `inference_state(key)` the instance's heartbeat and state (starting, ready, failed with the error),
`inference_starting(key)` the marker of a sent task, `inference_reply(request id)` the request's result events. A
request id is random and its reply key is read only by the caller that made it, so results never cross between
requests (or teams: each event also names the team, checked here). The caller checks that the team may use the model
and adapter directories (the API resolves them from the team's own models and jobs); the service trusts what it is
given.

Deployments (backend/services/deployments.py): a `Route` sends the call to a deployment's replicas instead of a
(model_dir, adapter_dir) key: every replica pops from the deployment's one request list, each request names the
adapter it is generated with (one batch mixes them), and the route starts replicas (through a generation lease:
backend/services/generation_leases.py) when none is alive or under load. Each `done` event names the replica that
served it (`SampleResult.instance`, `Delta.instance`).

Order of a call: refuse at once if the key's instance failed to load moments ago; push the requests; then, if no
instance is alive (no state key) and no task is on its way (no marker), send one. Pushing before looking means a
request is never stranded: an instance stops only when its list is empty (checked atomically with removing its state),
so either it sees the request or the caller sees it gone and starts another.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import redis

from contract import keys, tasks

START_MARKER_S = 120  # a sent task counts as "on its way" this long (waiting for a free slot, then loading)
REPLY_TTL_S = 600
POLL_S = 1.0  # longest wait on the reply keys between checks of the instance's state


class InferenceError(RuntimeError):
    """`code`: no_workers | load_failed | timeout | instance_lost | invalid_request."""

    def __init__(self, code: str, message: str, *, request_index: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.request_index = code, message, request_index


@dataclass(frozen=True)
class SampleRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    logprobs: bool = False
    prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0  # k > 0: the k most likely ids and their logprobs at each prompt position
    topk_logprobs: int = 0  # k > 0: ... at each sampled step (at the request's temperature)


TopK = list[list[Any] | None]  # per position [ids, logprobs] (k each), or None where nothing was computed


@dataclass(frozen=True)
class SampleResult:
    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str  # "stop" | "length"
    prompt_logprobs: list[float | None] | None = None
    topk_prompt_logprobs: TopK | None = None
    topk_logprobs: TopK | None = None
    instance: str | None = None  # the deployment replica that served it (None: a plain inference instance)


@dataclass(frozen=True)
class Route:
    """A deployment's replicas as the target of a call: `key` their shared request list, `adapter` what the requests
    are generated with (None: the base model); `state(client)` a replica's state (a ready or starting one first, a
    failed one, or None when none is alive); `ensure(client)` starts a replica when none is alive or on its way, and
    another under load (up to the deployment's max)."""

    key: str
    adapter: str | None
    state: Callable[[redis.Redis], dict[str, Any] | None]
    ensure: Callable[[redis.Redis], None]


@dataclass(frozen=True)
class CallUsage:
    device_seconds: float
    tokens_generated: int


Meter = Callable[[CallUsage], None]


@dataclass(frozen=True)
class Delta:
    """New tokens of one sample (`sample_deltas`); `finish_reason` is set on the sample's last delta."""

    request: int
    sample: int
    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str | None
    prompt_logprobs: list[float | None] | None = None  # on the last delta of sample 0, when the request asked
    topk_prompt_logprobs: TopK | None = None  # likewise
    topk_logprobs: TopK | None = None  # on each sample's last delta: every step's, when the request asked
    instance: str | None = None  # on each sample's last delta: the deployment replica that served it


def inference_key(model_dir: str, adapter_dir: str | None) -> str:
    return hashlib.sha256(json.dumps([model_dir, adapter_dir]).encode()).hexdigest()[:24]


def _check(request: SampleRequest, index: int) -> None:
    def bad(message: str) -> InferenceError:
        return InferenceError("invalid_request", f"requests[{index}]: {message}", request_index=index)

    if not request.prompt_ids or not all(isinstance(t, int) and t >= 0 for t in request.prompt_ids):
        raise bad("prompt_ids must be a non-empty list of token ids")
    if request.max_tokens < 1:
        raise bad(f"max_tokens must be >= 1 (got {request.max_tokens})")
    if request.n < 1 or request.n > 128:
        raise bad(f"n must be between 1 and 128 (got {request.n})")
    if request.temperature < 0 or not 0 < request.top_p <= 1:
        raise bad("need temperature >= 0 and 0 < top_p <= 1")
    if any(not isinstance(s, str) or not s for s in request.stop):
        raise bad("stop strings must be non-empty strings")


# -- sending the instance's task ------------------------------------------------------------------------------------
_apps: dict[str, Any] = {}
_apps_lock = threading.Lock()


def redis_url_of(client: redis.Redis) -> str:
    """The URL of the Redis `client` talks to (the broker Celery sends the instance's task through)."""
    pool = client.connection_pool
    kw = pool.connection_kwargs
    user, password = kw.get("username"), kw.get("password")
    auth = f"{quote(str(user or ''), safe='')}:{quote(str(password), safe='')}@" if password else ""
    db = int(kw.get("db") or 0)
    if kw.get("path"):
        return f"unix://{auth}{kw['path']}" + (f"?virtual_host={db}" if db else "")
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    return f"{scheme}://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{db}"


def _send_task(client: redis.Redis, key: str, model_dir: str, adapter_dir: str | None) -> None:
    url = redis_url_of(client)
    with _apps_lock:
        if url not in _apps:
            _apps[url] = tasks.make_celery(url)
        app = _apps[url]
    app.send_task(tasks.RUN_INFERENCE, args=[key, model_dir, adapter_dir])


def generation_workers(client: redis.Redis) -> int:
    """Slots of the live generation workers (the workers' registry, contract/keys.py `worker_registry`)."""
    slots = 0
    for name in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN, count=100):
        raw = client.get(name)
        if raw is not None:
            entry = json.loads(raw)
            if "generation" in entry.get("queues", []):
                slots += max(1, int(entry.get("slots", 1)))
    return slots


def _state(client: redis.Redis, key: str) -> dict[str, Any] | None:
    raw = client.get(keys.inference_state(key))
    return json.loads(raw) if raw else None


def _failed(state: dict[str, Any]) -> InferenceError:
    return InferenceError("load_failed", f"the model could not be loaded for inference: {state.get('error')}")


def _ensure_instance(client: redis.Redis, key: str, model_dir: str, adapter_dir: str | None) -> None:
    """Send the instance's task unless an instance is alive or a task is on its way. With no state seen, the start
    marker is claimed and the state read again: an instance writes its state before it deletes the marker, so the
    caller that claims it sees an instance that has just started (without the second read, a caller that saw
    neither claimed the marker the new instance had just deleted and sent a second task for the same key)."""
    state = _state(client, key)
    if state is None:
        marker = keys.inference_starting(key)
        if not client.set(marker, json.dumps({"at": time.time()}), nx=True, ex=START_MARKER_S):
            return  # on its way
        state = _state(client, key)
        if state is not None:
            client.delete(marker)
        elif generation_workers(client) == 0:
            client.delete(marker)
            raise InferenceError("no_workers", "no worker of the generation pool is registered, so no model can be "
                                 "served: start one with `streamrl worker --pool generation`")
        else:
            _send_task(client, key, model_dir, adapter_dir)
            return
    if state.get("state") == "failed":
        raise _failed(state)


# -- one call -------------------------------------------------------------------------------------------------------
def sample_deltas(client: redis.Redis, *, team_id: int, model_dir: str, adapter_dir: str | None,
                  requests: list[SampleRequest], timeout_s: float = 120.0, meter: Meter | None = None,
                  route: Route | None = None) -> Iterator[Delta]:
    """`sample_stream` with each delta's logprobs (None unless the request asked for them)."""
    return _deltas(client, team_id, model_dir, adapter_dir, requests, timeout_s, stream=True, meter=meter,
                   route=route)


def _deltas(client: redis.Redis, team_id: int, model_dir: str, adapter_dir: str | None,
            requests: list[SampleRequest], timeout_s: float, *, stream: bool,
            meter: Meter | None = None, route: Route | None = None) -> Iterator[Delta]:
    """The deltas of one call; `stream`: the instance sends tokens as they are generated, else each sample once."""
    if not requests:
        return
    seconds = [0.0] * len(requests)  # each request's device-seconds so far (its latest `done` says)
    sampled = [0]  # tokens yielded
    try:
        yield from _call(client, team_id, model_dir, adapter_dir, requests, timeout_s, stream, seconds, sampled,
                         route)
    finally:
        if meter is not None and (any(seconds) or sampled[0]):
            meter(CallUsage(sum(seconds), sampled[0]))


def _call(client: redis.Redis, team_id: int, model_dir: str, adapter_dir: str | None, requests: list[SampleRequest],
          timeout_s: float, stream: bool, seconds: list[float], sampled: list[int],
          route: Route | None = None) -> Iterator[Delta]:
    for index, request in enumerate(requests):
        _check(request, index)
    key = route.key if route is not None else inference_key(model_dir, adapter_dir)

    def state_of() -> dict[str, Any] | None:
        return route.state(client) if route is not None else _state(client, key)

    def ensure() -> None:
        if route is not None:
            route.ensure(client)
        else:
            _ensure_instance(client, key, model_dir, adapter_dir)

    state = state_of()
    if state is not None and state.get("state") == "failed":
        raise _failed(state)
    started = time.monotonic()
    deadline = started + timeout_s
    ids = [uuid.uuid4().hex for _ in requests]
    replies = {keys.inference_reply(rid): index for index, rid in enumerate(ids)}
    sent = [[0] * request.n for request in requests]  # tokens yielded per sample
    remaining = sum(request.n for request in requests)
    accepted: set[int] = set()
    payloads = [json.dumps({"id": rid, "team_id": team_id, "reply": keys.inference_reply(rid),
                            "deadline": time.time() + timeout_s, "stream": stream, **_wire(request),
                            **({"adapter": route.adapter} if route is not None else {})})
                for rid, request in zip(ids, requests, strict=True)]
    try:
        client.lpush(keys.inference_requests(key), *payloads)
        ensure()
        seen_state = False
        while remaining:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timeout(client, state_of(), timeout_s, seen_state, len(accepted), len(requests))
            popped = client.blpop(list(replies), timeout=max(0.01, min(POLL_S, left)))
            if popped is None:
                state = state_of()
                if state is not None:
                    seen_state = True
                    if state.get("state") == "failed":
                        raise _failed(state)
                elif accepted:
                    raise InferenceError("instance_lost", "the inference instance stopped while serving the request "
                                         "(its worker died or shut down); retry the request")
                else:  # gone before taking our request (it died, or a task is still on its way): make sure of one
                    ensure()
                continue
            index = replies[popped[0].decode() if isinstance(popped[0], bytes) else popped[0]]
            event = json.loads(popped[1])
            if event.get("id") != ids[index] or event.get("team_id") != team_id:
                continue  # not this request's (cannot happen: reply keys are random and private)
            kind = event.get("event")
            if kind == "accepted":
                accepted.add(index)
            elif kind == "error":
                raise InferenceError(str(event.get("code") or "invalid_request"),
                                     f"requests[{index}]: {event.get('message')}", request_index=index)
            elif kind in ("tokens", "done"):
                k = int(event["sample"])
                tokens = list(event["tokens"])
                new = tokens[sent[index][k]:] if kind == "done" else tokens
                start = sent[index][k] if kind == "done" else 0
                logprobs = event.get("logprobs")
                new_logprobs = (list(logprobs)[start:] if kind == "done" else list(logprobs)) \
                    if requests[index].logprobs and logprobs is not None else None
                sent[index][k] += len(new)
                sampled[0] += len(new)
                if kind == "done":
                    seconds[index] = max(seconds[index], float(event.get("device_seconds") or 0.0))
                finish = str(event["finish"]) if kind == "done" else None
                if finish is not None:
                    remaining -= 1
                if new or finish is not None:
                    yield Delta(index, k, new, new_logprobs, finish, event.get("prompt_logprobs"),
                                event.get("topk_prompt_logprobs"), event.get("topk_logprobs"),
                                event.get("instance") if kind == "done" else None)
    finally:
        client.delete(*replies)


def _timeout(client: redis.Redis, state: dict[str, Any] | None, timeout_s: float, seen_state: bool, accepted: int,
             total: int) -> InferenceError:
    if state is None and not seen_state:
        slots = generation_workers(client)
        if slots == 0:
            return InferenceError("no_workers", f"timed out after {timeout_s:g} s: no worker of the generation pool "
                                  "is registered (start one with `streamrl worker --pool generation`)")
        return InferenceError("timeout", f"timed out after {timeout_s:g} s waiting for a free generation slot to "
                              f"start the inference instance ({slots} slot(s) registered, all busy?)")
    if state is not None and state.get("state") == "starting":
        return InferenceError("timeout", f"timed out after {timeout_s:g} s: the model is still loading")
    return InferenceError("timeout", f"timed out after {timeout_s:g} s waiting for generation ({accepted} of "
                          f"{total} request(s) taken by the instance)")


def _wire(request: SampleRequest) -> dict[str, Any]:
    return {"prompt_ids": list(request.prompt_ids), "max_tokens": int(request.max_tokens),
            "temperature": float(request.temperature), "top_p": float(request.top_p), "n": int(request.n),
            "seed": request.seed, "stop": list(request.stop), "stop_token_ids": list(request.stop_token_ids),
            "logprobs": bool(request.logprobs), "prompt_logprobs": bool(request.prompt_logprobs),
            "topk_prompt_logprobs": int(request.topk_prompt_logprobs), "topk_logprobs": int(request.topk_logprobs)}


def retire(client: redis.Redis, model_dir: str, adapter_dir: str | None, ttl_s: float = 86400) -> None:
    """The key's instance (if any) stops once it has nothing in flight or waiting (workers/runtime/inference.py)."""
    client.set(keys.inference_retire(inference_key(model_dir, adapter_dir)), "1", ex=int(ttl_s))


def sample_stream(client: redis.Redis, *, team_id: int, model_dir: str, adapter_dir: str | None,
                  requests: list[SampleRequest], timeout_s: float = 120.0, meter: Meter | None = None
                  ) -> Iterator[tuple[int, int, list[int], str | None]]:
    """(request index, sample index, new token ids, finish reason or None) as tokens arrive."""
    for delta in sample_deltas(client, team_id=team_id, model_dir=model_dir, adapter_dir=adapter_dir,
                               requests=requests, timeout_s=timeout_s, meter=meter):
        yield delta.request, delta.sample, delta.token_ids, delta.finish_reason


def sample(client: redis.Redis, *, team_id: int, model_dir: str, adapter_dir: str | None,
           requests: list[SampleRequest], timeout_s: float = 120.0,
           meter: Meter | None = None, route: Route | None = None) -> list[list[SampleResult]]:
    """Every request's `n` samples, in order; blocks until all are done (InferenceError otherwise)."""
    tokens: list[list[list[int]]] = [[[] for _ in range(r.n)] for r in requests]
    logprobs: list[list[list[float]]] = [[[] for _ in range(r.n)] for r in requests]
    finish: list[list[str]] = [["length"] * r.n for r in requests]
    prompt: list[list[float | None] | None] = [None] * len(requests)
    topk_prompt: list[TopK | None] = [None] * len(requests)
    topk: list[list[TopK | None]] = [[None] * r.n for r in requests]
    served_by: list[list[str | None]] = [[None] * r.n for r in requests]
    for delta in _deltas(client, team_id, model_dir, adapter_dir, requests, timeout_s, stream=False, meter=meter,
                         route=route):
        tokens[delta.request][delta.sample].extend(delta.token_ids)
        if delta.logprobs is not None:
            logprobs[delta.request][delta.sample].extend(delta.logprobs)
        if delta.finish_reason is not None:
            finish[delta.request][delta.sample] = delta.finish_reason
        if delta.prompt_logprobs is not None:
            prompt[delta.request] = delta.prompt_logprobs
        if delta.topk_prompt_logprobs is not None:
            topk_prompt[delta.request] = delta.topk_prompt_logprobs
        if delta.topk_logprobs is not None:
            topk[delta.request][delta.sample] = delta.topk_logprobs
        if delta.instance is not None:
            served_by[delta.request][delta.sample] = delta.instance
    return [[SampleResult(token_ids=tokens[i][k], logprobs=logprobs[i][k] if r.logprobs else None,
                          finish_reason=finish[i][k], prompt_logprobs=prompt[i], topk_prompt_logprobs=topk_prompt[i],
                          topk_logprobs=topk[i][k], instance=served_by[i][k]) for k in range(r.n)]
            for i, r in enumerate(requests)]
