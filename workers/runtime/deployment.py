"""One replica of a deployment (`generation.run_deployment`): the base model with every adapter of the deployment
attached to one multi-LoRA engine (workers/generation/engines/hf_multi_lora.py), so requests for different adapters
decode in the same batch. The control plane's side: backend/services/deployments.py.

    serve_replica(client, deployment_id=4, replica=0, node=..., device="cpu")

It is an on-demand inference instance (workers/runtime/inference.py: same wire format, same reply events) with:
- its requests popped from the deployment's one list (`keys.inference_requests(keys.deployment_key(id))`), shared by
  all replicas, its state at `keys.inference_state(keys.replica_key(id, replica))`;
- each request generated with the adapter it names (`adapter`: the adapter's model id, or None for the base model);
  an unknown name is refused alone (`invalid_request`);
- every reply event naming the replica (`instance`), and a batch record in `keys.deployment_batches(id)` (steps,
  mixed_steps, max_adapters: the most distinct adapters in one engine step, replica);
- what it serves read from `keys.deployment_config(id)` at start; the config re-read every heartbeat: replica k
  stops after `idle_s` without requests only if k >= min_replicas, and as soon as it is idle when the deployment was
  deleted or changed (a newer `version`: a new replica loads the new adapters);
- its generation lease (`deploy-<id>.r<k>`, contract/leases.py) refreshed with every heartbeat and
  released when it stops.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

import redis

from contract import keys
from contract.leases import refresh, release
from workers.generation.engine import GenerationRequest
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.hf_batch import _Row
from workers.generation.engines.hf_multi_lora import MultiLoraEngine
from workers.runtime.inference import MAX_BATCH, STATE_TTL_S, InferenceInstance, _Batcher, lora_spec_of

log = logging.getLogger(__name__)
LEASE_TTL_S = 3 * STATE_TTL_S


def read_config(client: redis.Redis, deployment_id: int) -> dict[str, Any] | None:
    raw = client.get(keys.deployment_config(deployment_id))
    return json.loads(raw) if raw else None


class DeploymentReplica(InferenceInstance):
    def __init__(self, client: redis.Redis, deployment_id: int, replica: int, config: dict[str, Any], *,
                 node: str | None, device: str) -> None:
        super().__init__(client, keys.replica_key(deployment_id, replica), str(config["model_dir"]), None,
                         idle_s=float(config["idle_s"]), node=node, device=device)
        self.deployment_id, self.replica, self.version = deployment_id, replica, int(config["version"])
        self.adapters: dict[str, str] = dict(config.get("adapters") or {})
        # the engine's adapter names: model ids hold ':', '@' and '.', which peft's module keys cannot
        self.names = {model_id: f"adapter{index}" for index, model_id in enumerate(self.adapters)}
        self.requests_key = keys.inference_requests(keys.deployment_key(deployment_id))  # shared by the replicas
        self.max_adapters = 0
        self._apply(config)

    def _apply(self, config: dict[str, Any] | None) -> None:
        """Follow the deployment's config: gone or a newer version retires this replica (it stops once idle)."""
        if config is None or int(config["version"]) != self.version:
            self.client.set(keys.inference_retire(self.key), "1", ex=300)
            return
        keep = self.replica < int(config.get("min_replicas", 0))
        self.idle_s = math.inf if keep else float(config["idle_s"])

    def _beat(self) -> None:
        super()._beat()
        if not self.stopping:
            self._apply(read_config(self.client, self.deployment_id))
            refresh(self.client, self.key, LEASE_TTL_S)

    def _info(self, **extra: Any) -> str:
        return super()._info(replica=self.replica, deployment_id=self.deployment_id, in_flight=self.in_flight,
                             capacity=MAX_BATCH, version=self.version, **extra)

    def _reply(self, request: dict[str, Any], pipe: Any, **event: Any) -> None:
        super()._reply(request, pipe, instance=self.key, **event)

    def _load(self) -> HFEngine:
        engine = MultiLoraEngine(self.model_dir, max_batch_size=MAX_BATCH, device=self.device)
        for model_id, directory in self.adapters.items():
            engine.attach(self.names[model_id], lora_spec_of(directory)).update_weights(1, directory)
        return engine

    def _batcher(self) -> _Batcher:
        engine = self.engine
        assert isinstance(engine, MultiLoraEngine)
        return _Batcher(engine, self._on_step, version_of=lambda name: engine.versions.get(name, 0) if name else 0,
                        adapters=engine._mixed)

    def _admit(self, raw: Any) -> Any:
        try:
            adapter = json.loads(raw).get("adapter")
        except (ValueError, AttributeError):
            adapter = None
        if adapter is not None and adapter not in self.adapters:
            request = json.loads(raw)
            self._refuse(request, f"the deployment serves no adapter {str(adapter)[:200]!r}")
            return
        for generation_request in super()._admit(raw):
            yield _with_adapter(generation_request, None if adapter is None else self.names[adapter])

    def _on_step(self, rows: list[_Row], finished: set[int]) -> None:
        super()._on_step(rows, finished)
        adapters = len({row.request.adapter for row in rows})
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hincrby(keys.deployment_batches(self.deployment_id), "steps", 1)
            if adapters > 1:
                pipe.hincrby(keys.deployment_batches(self.deployment_id), "mixed_steps", 1)
            if adapters > self.max_adapters:
                self.max_adapters = adapters
                pipe.hset(keys.deployment_batches(self.deployment_id),
                          mapping={"max_adapters": adapters, "replica": self.key, "at": time.time()})
            pipe.execute()

    def run(self) -> str:
        try:
            return super().run()
        finally:
            release(self.client, self.key)


def _with_adapter(request: GenerationRequest, adapter: str | None) -> GenerationRequest:
    request.adapter = adapter
    return request


def serve_replica(client: redis.Redis, *, deployment_id: int, replica: int, node: str | None, device: str) -> str:
    config = read_config(client, deployment_id)
    if config is None:
        client.delete(keys.inference_starting(keys.replica_key(deployment_id, replica)))
        release(client, keys.replica_key(deployment_id, replica))
        return f"deployment {deployment_id} is gone: replica {replica} not started"
    return DeploymentReplica(client, deployment_id, replica, config, node=node, device=device).run()
