"""An on-demand inference instance (`generation.run_inference`): serves one (model_dir, adapter_dir) key with the hf
engine's continuous batching until it has had no request for `idle_s` seconds. The control plane's side, the Redis
keys and the wire format are in backend/services/inference.py.

    serve(client, key, model_dir, adapter_dir, idle_s=60, node=..., device="cpu")

The instance writes its state (`starting`, then `ready`; `failed` with the error when the model or adapter cannot be
loaded) to `keys.inference_state(key)` and refreshes it every HEARTBEAT_S (it expires after STATE_TTL_S, so a dead
instance is replaced by the next request). Requests are popped from `keys.inference_requests(key)`; each becomes `n`
engine requests fed into one long `generate_stream`; each request's reply list gets `accepted`, then (for streaming
callers) `tokens` after every step, then `done` per sample, or `error`. Stopping (idle, or the worker's warm shutdown)
removes the state only while the request list is empty, in one atomic step, so no request is left behind unserved.
A retired key (`keys.inference_retire`: superseded sampler weights) stops as soon as it is idle. A request with
`prompt_logprobs` gets the logprob of each prompt token given the ones before (None for the first) in its sample 0's
`done` event, from one forward pass of the served model over the prompt; `topk_prompt_logprobs` = k adds the k most
likely ids and their logprobs at each position from that same pass, and `topk_logprobs` = k the k most likely ids at
each sampled step from the logits the step sampled from (at the request's temperature, as the sampled logprobs are),
in each sample's `done` event. A top-k entry is `[ids, logprobs]`, or None where nothing was computed.

Instances are shared (every team using one base model sends to its key), so a request is checked before it enters
the engine: token ids (prompt and stop ids) must lie in the model's vocabulary (`vocab_size` of the embedding), and a
prompt that still fails its prompt-logprob pass is refused alone. A bad request gets its own `error` event
(`invalid_request`); the batch, and other callers' requests in flight, go on.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import torch

from contract import keys
from contract.spec import LoraSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.hf_batch import ContinuousBatcher, _Row
from workers.models import lora as lora_io
from workers.runtime.shutdown import ShutdownWatch
from workers.runtime.telemetry import Heartbeat

log = logging.getLogger(__name__)
HEARTBEAT_S = 2.0
STATE_TTL_S = 10
FAILED_TTL_S = 15  # a failed load stays visible this long: waiting callers read why, then the next request retries
MAX_BATCH = 32
POP = 16  # requests read in one round trip at most
IDLE_BLOCK_S = 0.2  # blocking read while nothing is in flight
REPLY_TTL_S = 600
# the instance stops only if no request is waiting: then its state goes in the same step
_STOP_IF_EMPTY = """
if redis.call('LLEN', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
return 0
"""


def lora_spec_of(adapter_dir: str | Path) -> LoraSpec:
    """The adapter's shape from its adapter_config.json (PEFT layout, workers/models/lora.py)."""
    path = Path(adapter_dir) / lora_io.ADAPTER_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{adapter_dir} holds no LoRA adapter ({lora_io.ADAPTER_CONFIG})")
    config = json.loads(path.read_text())
    targets = config.get("target_modules")
    if isinstance(targets, str):
        targets = None if targets == "all-linear" else [targets]
    return LoraSpec(rank=int(config["r"]), alpha=float(config.get("lora_alpha", config["r"])),
                    target_modules=sorted(targets) if targets else None)


def load_engine(model_dir: str, adapter_dir: str | None, device: str) -> HFEngine:
    """The hf engine on `model_dir`; with `adapter_dir`, the base model wrapped with that PEFT adapter."""
    for what, path in (("model", model_dir), ("adapter", adapter_dir)):
        if path is not None and not Path(path).is_dir():
            raise FileNotFoundError(f"the {what} directory {path} does not exist on this worker")
    if adapter_dir is None:
        return HFEngine(model_dir, max_batch_size=MAX_BATCH, device=device)
    engine = HFEngine(model_dir, max_batch_size=MAX_BATCH, device=device, lora=lora_spec_of(adapter_dir))
    engine.update_weights(1, adapter_dir)
    return engine


@dataclass
class _Pending:
    request: dict[str, Any]
    left: int  # samples not finished yet
    prompt_logprobs: list[float | None] | None = None
    topk_prompt: list[Any] | None = None  # [ids, logprobs] per prompt position (None for the first)
    device_seconds: float = 0.0  # its rows' shares of the engine's steps (usage: each `done` carries the total so far)


class _Batcher(ContinuousBatcher):
    """The hf engine's continuous batching, plus stop token ids and a callback after every sampled token."""

    def __init__(self, engine: HFEngine, on_step: Any, **routing: Any) -> None:
        """`routing`: a multi-LoRA engine's per-row adapters (`version_of`, `adapters`: hf_batch.ContinuousBatcher)."""
        super().__init__(engine.model, engine.tokenizer, max_batch_size=engine.max_batch_size,
                         eos_ids=engine.eos_ids, seed_rng=engine.seed_rng,
                         min_free_slots=max(1, engine.max_batch_size // 4), **routing)
        self.on_step = on_step

    def _append_tokens(self, logits: Any, rows: range) -> list[int]:
        self._record_topk(logits, rows)
        finished = super()._append_tokens(logits, rows)
        self.on_step([self.rows[i] for i in rows], set(finished))
        return finished

    def _record_topk(self, logits: Any, rows: range) -> None:
        """The top-k of the distribution this step samples from (at each row's temperature), for the rows that ask:
        one log_softmax + topk over those rows together."""
        wanted = [(offset, self.rows[i].request) for offset, i in enumerate(rows)
                  if self.rows[i].request.meta.get("topk")]
        if not wanted:
            return
        index = torch.tensor([offset for offset, _ in wanted], device=logits.device)
        temperatures = torch.tensor([r.sampling.temperature if r.sampling.temperature > 0 else 1.0 for _, r in wanted],
                                    device=logits.device, dtype=torch.float32)
        scaled = logits.index_select(0, index).float() / temperatures[:, None]
        top = torch.log_softmax(scaled, dim=-1).topk(max(int(r.meta["topk"]) for _, r in wanted), dim=-1)
        ids, values = top.indices.tolist(), top.values.tolist()
        for (_, request), row_ids, row_values in zip(wanted, ids, values, strict=True):
            k = int(request.meta["topk"])
            request.meta["topk_out"].append([row_ids[:k], row_values[:k]])

    def _finish_reason(self, row: _Row, positions_used: int) -> str | None:
        reason = super()._finish_reason(row, positions_used)
        if reason is None and row.response_ids[-1] in row.request.meta.get("stop_token_ids", ()):
            return "stop"
        return reason


class InferenceInstance:
    def __init__(self, client: redis.Redis, key: str, model_dir: str, adapter_dir: str | None, *, idle_s: float,
                 node: str | None, device: str) -> None:
        self.client, self.key = client, key
        self.model_dir, self.adapter_dir = model_dir, adapter_dir
        self.idle_s, self.node, self.device = idle_s, node, device
        self.requests_key, self.state_key = keys.inference_requests(key), keys.inference_state(key)
        self.shutdown = ShutdownWatch(client, node)
        self.state = "starting"
        self.stopping = False
        self.lock = threading.Lock()  # a beat never rewrites the state the stop step removed
        self.pending: dict[str, _Pending] = {}
        self.in_flight = 0
        self.served = 0
        self.engine: HFEngine | None = None
        self.stepped_at = time.monotonic()  # the end of the engine's previous step (or when it became busy)
        self._stop_if_empty = client.register_script(_STOP_IF_EMPTY)

    # -- state ----------------------------------------------------------------------------------------------------
    def _info(self, **extra: Any) -> str:
        return json.dumps({"state": self.state, "pid": os.getpid(), "host": socket.gethostname(), "node": self.node,
                           "model_dir": self.model_dir, "adapter_dir": self.adapter_dir, "at": time.time(),
                           "served": self.served, **extra})

    def _beat(self) -> None:
        with self.lock:
            if not self.stopping and self.state != "failed":
                self.client.set(self.state_key, self._info(), ex=STATE_TTL_S)

    def _try_stop(self) -> bool:
        with self.lock:
            self.stopping = bool(self._stop_if_empty(keys=[self.requests_key, self.state_key]))
            return self.stopping

    # -- replies --------------------------------------------------------------------------------------------------
    def _reply(self, request: dict[str, Any], pipe: Any, **event: Any) -> None:
        body = json.dumps({"id": request["id"], "team_id": request["team_id"], **event})
        pipe.rpush(request["reply"], body)
        pipe.expire(request["reply"], REPLY_TTL_S)

    def _refuse(self, request: dict[str, Any], message: str, code: str = "invalid_request") -> None:
        with self.client.pipeline(transaction=False) as pipe:
            self._reply(request, pipe, event="error", code=code, message=message)
            pipe.execute()

    def _on_step(self, rows: list[_Row], finished: set[int]) -> None:
        """After a step: the new token of every unfinished row of a streaming caller (finished rows go in `done`).
        The step's time is shared equally by its rows' requests (their usage in device-seconds)."""
        now = time.monotonic()
        share, self.stepped_at = (now - self.stepped_at) / max(1, len(rows)), now
        for row in rows:
            owner = self.pending.get(row.request.meta["rid"])
            if owner is not None:
                owner.device_seconds += share
        with self.client.pipeline(transaction=False) as pipe:
            count = 0
            for row in rows:
                pending = self.pending.get(row.request.meta["rid"])
                if pending is None or not pending.request.get("stream") or row.finish_reason is not None:
                    continue
                lp = [row.logprobs[-1]] if pending.request.get("logprobs") else None
                self._reply(pending.request, pipe, event="tokens", sample=row.request.meta["sample"],
                            tokens=[row.response_ids[-1]], logprobs=lp)
                count += 1
            if count:
                pipe.execute()

    # -- serving --------------------------------------------------------------------------------------------------
    def _admit(self, raw: Any) -> Iterator[GenerationRequest]:
        try:
            request = json.loads(raw)
            rid, n = str(request["id"]), int(request["n"])
            prompt = [int(t) for t in request["prompt_ids"]]
        except (ValueError, KeyError, TypeError) as err:
            log.warning("inference %s: unreadable request dropped: %s", self.key, err)
            return
        if float(request.get("deadline", 0)) < time.time():
            return  # its caller gave up
        assert self.engine is not None
        limit = int(getattr(self.engine.model.config, "max_position_embeddings", 1 << 30))
        if len(prompt) >= limit:
            self._refuse(request, f"the prompt has {len(prompt)} tokens, more than the model's context of {limit} "
                         "allows")
            return
        if not prompt or int(request["max_tokens"]) < 1 or float(request["temperature"]) < 0 \
                or not 0 < float(request["top_p"]) <= 1:
            self._refuse(request, "need a non-empty prompt, max_tokens >= 1, temperature >= 0 and 0 < top_p <= 1")
            return
        problem = self._token_problem(prompt, request.get("stop_token_ids") or ())
        if problem is not None:
            self._refuse(request, problem)
            return
        prompt_logprobs, topk_prompt = None, None
        if request.get("prompt_logprobs") or request.get("topk_prompt_logprobs"):
            try:
                prompt_logprobs, topk_prompt = self._prompt_logprobs(prompt, int(request.get("topk_prompt_logprobs")
                                                                                 or 0))
            except (IndexError, ValueError, RuntimeError) as err:  # this request's pass failed, not the instance
                log.warning("inference %s: prompt logprobs of request %s failed: %s", self.key, rid, err)
                self._refuse(request, f"computing the prompt's logprobs failed: {type(err).__name__}: {err}")
                return
        self.pending[rid] = _Pending(request, n, prompt_logprobs, topk_prompt)
        if self.in_flight == 0:  # the engine was idle: its next step's time starts now
            self.stepped_at = time.monotonic()
        with self.client.pipeline(transaction=False) as pipe:
            self._reply(request, pipe, event="accepted")
            pipe.execute()
        seed = request.get("seed")
        for k in range(n):
            sampling = SamplingParams(temperature=float(request["temperature"]), top_p=float(request["top_p"]),
                                      max_tokens=int(request["max_tokens"]), stop=tuple(request.get("stop") or ()),
                                      seed=None if seed is None else int(seed) + k)
            self.in_flight += 1
            yield GenerationRequest(f"{rid}:{k}", prompt, sampling,
                                    meta={"rid": rid, "sample": k, "topk": int(request.get("topk_logprobs") or 0),
                                          "topk_out": [],
                                          "stop_token_ids": frozenset(request.get("stop_token_ids") or ())})

    def _token_problem(self, prompt: list[int], stop_ids: Any) -> str | None:
        """Why the ids cannot enter the engine (an id outside the embedding would crash the whole batch), or None."""
        assert self.engine is not None
        vocab = int(self.engine.model.get_input_embeddings().num_embeddings)
        for position, token in enumerate(prompt):
            if not 0 <= token < vocab:
                return (f"prompt token {position} is {token}, outside the model's vocabulary (token ids 0 to "
                        f"{vocab - 1})")
        for position, token in enumerate(stop_ids):
            if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < vocab:
                return f"stop token {position} is {token!r}, outside the model's vocabulary (0 to {vocab - 1})"
        return None

    def _prompt_logprobs(self, prompt: list[int], topk: int = 0) -> tuple[list[float | None], list[Any] | None]:
        """log p(prompt[i] | prompt[:i]) under the served model (temperature 1), None for the first token; with
        `topk`, also the k most likely ids and their logprobs at each position (None for the first)."""
        assert self.engine is not None
        with torch.inference_mode():
            ids = torch.tensor([prompt], dtype=torch.long, device=self.engine.device)
            logits = self.engine.model(input_ids=ids).logits[0, :-1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            chosen = logprobs.gather(-1, ids[0, 1:, None])[:, 0]
            top = logprobs.topk(min(topk, logprobs.shape[-1]), dim=-1) if topk > 0 else None
        if top is None:
            return [None, *chosen.cpu().tolist()], None
        pairs = [list(pair) for pair in zip(top.indices.cpu().tolist(), top.values.cpu().tolist(), strict=True)]
        return [None, *chosen.cpu().tolist()], [None, *pairs]

    def _feed(self) -> Iterator[GenerationRequest | None]:
        last_request = time.monotonic()
        checked_shutdown = 0.0
        while True:
            raw: Any = self.client.rpop(self.requests_key, POP)
            if raw:
                last_request = time.monotonic()
                for item in raw:
                    yield from self._admit(item)
                continue
            if self.in_flight == 0:
                now = time.monotonic()
                if now - checked_shutdown > 1.0:
                    checked_shutdown = now
                    retired = self.client.exists(keys.inference_retire(self.key))
                    if (self.shutdown.check() or retired) and self._try_stop():
                        log.info("inference %s: %s, stopping", self.key, "retired" if retired else "shutdown")
                        return
                if now - last_request >= self.idle_s and self._try_stop():
                    log.info("inference %s: idle for %.0f s, stopping", self.key, now - last_request)
                    return
                popped: Any = self.client.brpop([self.requests_key], timeout=IDLE_BLOCK_S)
                if popped is not None:
                    last_request = time.monotonic()
                    yield from self._admit(popped[1])
                    continue
            yield None

    def _done(self, result: Any) -> None:
        rid, k = result.meta["rid"], result.meta["sample"]
        self.in_flight -= 1
        pending = self.pending.get(rid)
        if pending is None:
            return
        with self.client.pipeline(transaction=False) as pipe:
            self._reply(pending.request, pipe, event="done", sample=k, tokens=result.response_ids,
                        logprobs=result.logprobs if pending.request.get("logprobs") else None,
                        finish=result.finish_reason, device_seconds=pending.device_seconds,
                        **({"prompt_logprobs": pending.prompt_logprobs}
                                                        if k == 0 and pending.prompt_logprobs is not None else {}),
                        **({"topk_prompt_logprobs": pending.topk_prompt}
                           if k == 0 and pending.topk_prompt is not None else {}),
                        **({"topk_logprobs": result.meta["topk_out"][:len(result.response_ids)]}
                           if result.meta.get("topk") else {}))
            pipe.execute()
        pending.left -= 1
        if pending.left == 0:
            del self.pending[rid]
            self.served += 1

    def _pop_one(self) -> Any:
        return self.client.rpop(self.requests_key)

    def _fail(self, err: BaseException) -> str:
        message = f"{type(err).__name__}: {err}"
        with self.lock:
            self.state = "failed"
            self.client.set(self.state_key, self._info(error=message), ex=FAILED_TTL_S)
        while (raw := self._pop_one()) is not None:  # the callers waiting now learn why at once
            try:
                self._refuse(json.loads(raw), f"the model could not be loaded for inference: {message}",
                             code="load_failed")
            except (ValueError, KeyError, TypeError):
                continue
        return message

    def run(self) -> str:
        heartbeat = Heartbeat(self._beat, interval_s=HEARTBEAT_S, name=f"inference-{self.key}")
        heartbeat.start()
        self.client.delete(keys.inference_starting(self.key))  # picked up: the next caller may send a task again
        try:
            try:
                self.engine = self._load()
            except Exception as err:  # a bad model or adapter: the callers get the reason, the worker goes on
                log.warning("inference %s: loading %s failed: %s", self.key, self.model_dir, err)
                return f"inference instance {self.key} failed to load: {self._fail(err)}"
            with self.lock:
                self.state = "ready"
            self._beat()
            batcher = self._batcher()
            for result in batcher.run(self._feed()):
                self._done(result)
        finally:
            heartbeat.stop()
            with self.lock:
                if self.state != "failed":
                    self.stopping = True
                    self.client.delete(self.state_key)
        return f"inference instance {self.key} stopped after {self.served} request(s)"


    def _load(self) -> HFEngine:
        return load_engine(self.model_dir, self.adapter_dir, self.device)

    def _batcher(self) -> _Batcher:
        assert self.engine is not None
        return _Batcher(self.engine, self._on_step)


def serve(client: redis.Redis, key: str, model_dir: str, adapter_dir: str | None, *, idle_s: float,
          node: str | None, device: str) -> str:
    return InferenceInstance(client, key, model_dir, adapter_dir, idle_s=idle_s, node=node, device=device).run()
