"""`VLLMMultiLoraEngine`: vLLM serving the LoRA adapters of several jobs on one base model in the same continuous
batch, the vLLM counterpart of `MultiLoraEngine` (engines/hf_multi_lora.py) for shared generation instances
(workers/runtime/shared.py, docs/operator.md#shared-generation-instances).

    engine = VLLMMultiLoraEngine(model_dir, max_batch_size=256, max_loras=4, max_lora_rank=16)
    view = engine.attach("j3-gen-0", spec.training.lora)    # the base model until a version loads
    transport.load_into(view, version)                       # the job's own transport loads ITS adapter only
    for result in engine.generate_stream(requests):          # each request names its adapter (request.adapter)
        ...
    engine.detach("j3-gen-0")

vLLM batches rows of different LoRAs itself (the base layers once for the batch, each row's low-rank product from its
adapter's slot); this engine decides which `LoRARequest` each request carries and owns the adapters' directories.
The views are `AdapterView`s, as on the hf engine. Invariants:

- A request takes its adapter's current version when it is admitted and keeps it to its end (vLLM does not swap a
  running request's LoRA), so `records_versions` is False: each view behaves as a private `VLLMEngine` with `lora`
  does. An attached adapter with no version yet (version 0) generates with the base model; a request naming an
  adapter that is not attached is a ValueError; a request naming none is the base model.
- Every (adapter, version) loaded is its own LoRA id (a counter, never reused), read by vLLM when it loads
  (`add_lora`: a bad adapter fails its own job's load, not the shared batch) from a temporary PEFT directory.
- A version's directory (and vLLM's cached copy) is removed once no request admitted with it is in flight and it is
  not among its adapter's newest `KEEP`; a detached adapter's all go (those of rows still decoding, as they finish).
- At most `max_loras` adapters are attached (vLLM's LoRA slots per batch; `max_cpu_loras` is at least twice that, an
  old and a new version of each); an adapter's rank must fit vLLM's `max_lora_rank` (`vllm_lora_rank`).
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from contract.sharing import vllm_lora_rank
from contract.spec import LoraSpec
from workers.generation.engine import GenerationRequest, GenerationResult
from workers.generation.engines.hf_multi_lora import AdapterView
from workers.generation.engines.vllm import VLLMEngine
from workers.models.lora import adapter_config_json, is_adapter, write_adapter

KEEP = 2  # versions kept per adapter (directory and vLLM's cached copy), besides any that rows in flight still use


class VLLMMultiLoraEngine(VLLMEngine):
    """vLLM over one base model holding one named adapter per attached job instance (not in ENGINES: the shared
    runtime builds it)."""

    def __init__(self, model_dir: str | Path, *, max_batch_size: int, max_loras: int, max_lora_rank: int,
                 device: str = "cpu", seed: int = 0, dtype: str = "float32", max_model_len: int | None = None,
                 kv_cache_gb: int = 1, **llm_kwargs: Any) -> None:
        if max_loras < 1:
            raise ValueError(f"max_loras must be >= 1 (got {max_loras})")
        self.max_loras, self.max_lora_rank = max_loras, vllm_lora_rank(max_lora_rank)
        self.versions: dict[str, int] = {}  # adapter name -> weights version loaded into it (0: none yet)
        self.specs: dict[str, LoraSpec] = {}  # adapter name -> its shape (adapter_config.json of each version)
        self.current: dict[str, Any] = {}  # adapter name -> the LoRARequest of its version (absent at version 0)
        self.tokenizer: Any = None
        self._held: dict[int, tuple[str | None, tempfile.TemporaryDirectory[str]]] = {}  # LoRA id -> (adapter or
        # None once detached, its directory): every version vLLM may still read
        self._rows: dict[str, Any] = {}  # request id -> the LoRARequest it was admitted with (None: the base model)
        self._ids = itertools.count(1)  # LoRA ids (vLLM wants >= 1)
        cpu_loras = max(2 * max_loras, int(llm_kwargs.pop("max_cpu_loras", 0)))
        super().__init__(model_dir, max_batch_size=max_batch_size, device=device, dtype=dtype, seed=seed,
                         max_model_len=max_model_len, kv_cache_gb=kv_cache_gb, enable_lora=True, max_loras=max_loras,
                         max_lora_rank=self.max_lora_rank, max_cpu_loras=cpu_loras, **llm_kwargs)

    @property
    def records_versions(self) -> bool:  # type: ignore[override]
        return False  # a request keeps the adapter version it was admitted with

    def load(self, model_dir: str | Path) -> None:
        super().load(model_dir)
        self.tokenizer = self.llm.get_tokenizer()

    # -- adapters -----------------------------------------------------------------------------------------------------
    def attach(self, name: str, spec: LoraSpec) -> AdapterView:
        """A new adapter `name` of shape `spec`, at version 0 (its requests generate with the base model)."""
        if name in self.specs:
            raise ValueError(f"adapter {name!r} is already attached")
        if spec.rank > self.max_lora_rank:
            raise ValueError(f"adapter {name!r} has LoRA rank {spec.rank}, above this engine's max_lora_rank "
                             f"{self.max_lora_rank}")
        if len(self.specs) >= self.max_loras:
            raise ValueError(f"cannot attach adapter {name!r}: {len(self.specs)} adapters are attached, this engine's "
                             f"max_loras is {self.max_loras}")
        self.specs[name], self.versions[name] = spec, 0
        return AdapterView(self, name)

    def detach(self, name: str) -> None:
        """Drop adapter `name`; rows of it still decoding finish on their version, then its directories go."""
        if self.specs.pop(name, None) is None:
            return
        del self.versions[name]
        self.current.pop(name, None)
        for lora_id, (owner, held) in list(self._held.items()):
            if owner == name:
                self._held[lora_id] = (None, held)
        self._prune()

    def load_adapter(self, name: str, version: int, state_dict: dict[str, Any], origin: str) -> None:
        """Version `version` of adapter `name`: requests admitted from now on generate with it."""
        from vllm.lora.request import LoRARequest

        spec = self.specs.get(name)
        if spec is None:
            raise ValueError(f"adapter {name!r} is not attached")
        if not is_adapter(state_dict):
            raise ValueError(f"weights from {origin} are not a LoRA adapter; a shared instance serves LoRA jobs only")
        ranks = {int(t.shape[0]) for key, t in state_dict.items() if ".lora_A." in key}
        if ranks != {spec.rank}:
            raise ValueError(f"weights from {origin} have LoRA rank {sorted(ranks)}, but adapter {name!r} was "
                             f"attached with rank {spec.rank}")
        lora_id = next(self._ids)
        held = tempfile.TemporaryDirectory(prefix=f"adapter-{name}-v{version}-")
        try:
            write_adapter(held.name, state_dict, adapter_config_json(spec, state_dict))
            request = LoRARequest(f"{name}-{lora_id}", lora_id, held.name)
            self._require_llm().llm_engine.add_lora(request)  # read and checked now, cached for the batch
        except BaseException:
            held.cleanup()
            raise
        self._held[lora_id] = (name, held)
        self.current[name], self.versions[name] = request, version
        self._prune()

    def update_weights(self, version: int, source: str | Path) -> None:
        raise ValueError("a shared multi-LoRA engine loads weights per adapter: attach(name, spec) and load the "
                         "version through that view")

    def load_tensors(self, version: int, state_dict: dict[str, Any]) -> None:
        self.update_weights(version, "tensors")

    def _prune(self) -> None:
        """Remove the versions no row in flight uses that are not among their attached adapter's newest KEEP."""
        in_use = {request.lora_int_id for request in self._rows.values() if request is not None}
        newest: dict[str, list[int]] = {}
        for lora_id, (owner, _) in sorted(self._held.items(), reverse=True):
            if owner is not None and len(kept := newest.setdefault(owner, [])) < KEEP:
                kept.append(lora_id)
        keep = in_use.union(*newest.values())
        for lora_id in [found for found in self._held if found not in keep]:
            self._held.pop(lora_id)[1].cleanup()
            self._require_llm().llm_engine.remove_lora(lora_id)

    # -- generation ---------------------------------------------------------------------------------------------------
    def generate_stream(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationResult]:
        """`VLLMEngine`'s continuous batching; each request carries the LoRA its adapter had when the feed yielded it
        (a version the feed loads right after is for the requests after). Rows still in flight when the stream stops
        early (an error, or the consumer closed it) are aborted."""
        try:
            yield from super().generate_stream(self._admit(requests))
        finally:
            left = list(self._rows)
            self._rows.clear()
            if left and self.llm is not None:
                self.llm.llm_engine.abort_request(left)
            self._prune()

    def _admit(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationRequest | None]:
        for item in requests:
            if item is not None:
                if item.adapter is not None and item.adapter not in self.specs:
                    raise ValueError(f"request {item.request_id!r} names adapter {item.adapter!r}, which is not "
                                     f"attached to this engine")
                self._rows[item.request_id] = self.current.get(item.adapter) if item.adapter is not None else None
            yield item

    def _lora_request(self, request: GenerationRequest) -> Any:
        return self._rows[request.request_id]

    def _finished(self, request: GenerationRequest) -> None:
        if self._rows.pop(request.request_id, None) is not None:
            self._prune()  # a version may have waited only for this row
