"""`MultiLoraEngine`: one base model serving the LoRA adapters of several jobs in the same continuous batch
(shared generation instances: workers/runtime/shared.py, docs/operator.md#shared-generation-instances).

    engine = MultiLoraEngine(model_dir, max_batch_size=128, device="cpu")
    view = engine.attach("j3-gen-0", spec.training.lora)    # a zero adapter (the base model) until a version loads
    transport.load_into(view, version)                       # the job's own transport loads ITS adapter only
    for result in engine.generate_stream(requests):          # each request names its adapter (request.adapter)
        ...
    engine.detach("j3-gen-0")

Each forward pass applies every row's own adapter (the base layers run once for the whole batch), so N jobs on one
base model hold one copy of the base weights and decode in one batched forward instead of N. Two ways to add the
adapters' low-rank products, the same tokens either way:
  stacked       (the default) every adapter's A side by side (one matmul for all rows), a mask keeping each row's
                own adapter's columns, every B side by side (one matmul): 4 ops per adapted layer whatever the
                number of adapters, for N x the (small) LoRA arithmetic. A 4-adapter step dispatches as many ops as
                a 1-adapter step, and on CPU it is also faster: 0.84x (15M) and 0.95x (100M) the per-adapter step
                (`python bench/multi_lora_forward.py`, rank 16, 128 rows).
  per adapter   (`stacked=False`) each adapter's product on its own rows (index_select, A, B, scale, index_add:
                ~5 ops per adapter per adapted layer; least arithmetic, for many adapters of large rank). On an
                H200 it made a 4-adapter step ~2x a 1-adapter step: small models' steps there are bound by kernel
                launches (bench/multitenant.py --device cuda).
An `AdapterView` is what one job's instance loop sees as its engine: its adapter's version and loading into its
adapter, nothing of the others'. Each token's version is its own adapter's (`version_marks`), so in-flight updates
and staleness bounds work per job as on a private instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from peft import get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear

from contract.spec import LoraSpec, SpeculativeMode
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.hf_batch import ContinuousBatcher
from workers.models import lora as lora_io
from workers.models.shared_base import MappedBase, map_frozen_weights


class MultiLoraEngine(HFEngine):
    """The hf engine over a base model that holds one named adapter per attached job instance."""

    def __init__(self, model_dir: str | Path, *, max_batch_size: int, device: str = "cpu", seed: int = 0,
                 base_cache: Path | None = None, stacked: bool = True, speculative: SpeculativeMode = "off") -> None:
        """`base_cache`: map the base weights from the host's shared copy (workers/models/shared_base.py; the file
        its LoRA trainers map too): adapters change here, the base never does. `stacked`: how mixed batches add the
        adapters (module docstring). `speculative`: grouped speculative decoding (hf_speculative.py); a group is a
        prompt on one adapter."""
        super().__init__(model_dir, max_batch_size=max_batch_size, device=device, seed=seed, speculative=speculative)
        self.stacked = stacked
        self.mapped_base: MappedBase | None = None
        if base_cache is not None:
            self.model.requires_grad_(False)
            self.mapped_base = map_frozen_weights([self.model], Path(model_dir), base_cache)
        self.versions: dict[str, int] = {}  # adapter name -> weights version loaded into it
        self.peft: Any = None  # the peft wrapper; its adapter layers are injected into `self.model` in place
        self._active: str | None = None  # the adapter peft applies to every row when no per-row names are given
        self._routing: list[tuple[str, torch.Tensor]] | None = None  # mixed pass: (adapter, its row indices)
        self._routed: set[int] = set()  # ids of the layers given the routed forward (layers live as long as we do)
        self._ids: dict[str, int] = {}  # adapter name -> a number never reused (the stacked way's row owners)
        self._next_id = 0
        self._epoch = 0  # bumped whenever an adapter is attached, detached or loaded: stacks older than it are stale
        self._stacks: dict[int, _Stack] = {}  # id(layer) -> its adapters side by side (stacked way)
        self._row_owner: torch.Tensor | None = None  # stacked mixed pass: each row's adapter number (-1: none)
        self._masks: dict[tuple[str, ...], torch.Tensor] = {}  # stacked mixed pass: row/column masks by adapter set

    def attach(self, name: str, spec: LoraSpec) -> AdapterView:
        """A new adapter `name` of shape `spec` (B = 0: it generates exactly what the base model does)."""
        if name in self.versions:
            raise ValueError(f"adapter {name!r} is already attached")
        config = lora_io.lora_config(spec)
        if self.peft is None:
            self.peft = get_peft_model(self.model, config, adapter_name=name)
        else:
            self.peft.add_adapter(name, config)
        self._active = None  # peft's active adapter is whatever it chose: set it again before relying on it
        self.peft.eval()
        self._route_layers()  # peft refuses per-row adapters in training mode
        self.versions[name] = 0
        self._ids[name] = self._next_id
        self._next_id += 1
        self._epoch += 1
        return AdapterView(self, name)

    def detach(self, name: str) -> None:
        """Drop adapter `name` (its rows must have finished). The last one stays loaded, unused: peft keeps one."""
        if self.versions.pop(name, None) is None:
            return
        self._ids.pop(name, None)
        self._epoch += 1
        if self.versions:
            self.peft.delete_adapter(name)  # peft activates another one if it was active
            self._active = None

    def load_adapter(self, name: str, version: int, state_dict: dict[str, Any], origin: str) -> None:
        if name not in self.versions:
            raise ValueError(f"adapter {name!r} is not attached")
        if not lora_io.is_adapter(state_dict):
            raise ValueError(f"weights from {origin} are not a LoRA adapter; a shared instance serves LoRA jobs only")
        lora_io.load_adapter(self.peft, state_dict, name=name)
        self.versions[name] = version
        self._epoch += 1

    @contextmanager
    def _mixed(self, names: list[str | None]) -> Iterator[None]:
        """One forward pass with each row's adapter. All rows on one adapter (one job on the instance, or one
        job's turn): that adapter made active, the plain forward. Mixed rows: every adapted linear layer adds each
        adapter's low-rank product to its own rows (`_routed_forward`, the row indices computed once per pass);
        peft's own mixed batches (hooks registered per pass, row lists rebuilt in every layer) cost ~40% of a
        decode step on small models."""
        if self.peft is None:
            yield
            return
        first = names[0] if names else None
        if first is not None and all(name == first for name in names):
            if self._active != first:
                self.peft.base_model.set_adapter(first)
                self._active = first
            yield
            return
        device = self.model.device
        if self.stacked:
            # -1: no adapter (the base model), as for a row whose adapter was detached meanwhile
            self._row_owner = torch.tensor([self._ids.get(name, -1) if name else -1 for name in names], device=device)
        else:
            rows: dict[str, list[int]] = {}
            for index, name in enumerate(names):
                if name is not None:
                    rows.setdefault(name, []).append(index)
            self._routing = [(name, torch.tensor(found, device=device)) for name, found in rows.items()]
        try:
            yield
        finally:
            self._routing, self._row_owner = None, None
            self._masks.clear()

    def _stack(self, layer: Any) -> _Stack | None:
        """`layer`'s attached adapters side by side (None: it adapts none of them), rebuilt after any change."""
        stack = self._stacks.get(id(layer))
        if stack is not None and stack.epoch == self._epoch:
            return stack
        names = tuple(name for name in self.versions if name in layer.lora_A)
        if not names:
            return None
        a = [layer.lora_A[name].weight for name in names]
        stack = _Stack(
            epoch=self._epoch, names=names,
            a=torch.cat(a),  # [sum of ranks, in]
            b=torch.cat([layer.lora_B[name].weight * layer.scaling[name] for name in names], dim=1),  # [out, sum]
            owner=torch.cat([torch.full((w.shape[0],), self._ids[name], device=w.device)
                             for name, w in zip(names, a, strict=True)]),
        )
        self._stacks[id(layer)] = stack
        return stack

    def _mask(self, stack: _Stack) -> torch.Tensor:
        """[rows, 1, sum of ranks]: 1 where the column belongs to the row's own adapter (one per adapter set a pass)."""
        mask = self._masks.get(stack.names)
        if mask is None:
            assert self._row_owner is not None
            mask = (self._row_owner[:, None] == stack.owner[None, :]).to(stack.a.dtype)[:, None, :]
            self._masks[stack.names] = mask
        return mask

    def _route_layers(self) -> None:
        """Give every adapted linear layer the routed forward (once per layer; new adapters reuse the layers)."""
        for module in self.model.modules():
            if isinstance(module, LoraLinear) and id(module) not in self._routed:
                module.forward = _routed_forward(module, self)  # type: ignore[method-assign]
                self._routed.add(id(module))

    def _batcher(self, **routing: Any) -> ContinuousBatcher:
        return super()._batcher(version_of=lambda adapter: self.versions.get(adapter, 0) if adapter else 0,
                                adapters=self._mixed, **routing)


@dataclass(frozen=True)
class _Stack:
    epoch: int
    names: tuple[str, ...]  # the adapters, in column order
    a: torch.Tensor  # their A matrices stacked: [sum of ranks, in]
    b: torch.Tensor  # their scaling * B side by side: [out, sum of ranks]
    owner: torch.Tensor  # each column's adapter number: [sum of ranks]


def _routed_forward(layer: Any, engine: MultiLoraEngine) -> Callable[..., torch.Tensor]:
    """`layer`'s forward: peft's own outside a mixed pass; inside one, the base layer for every row plus each row's
    own adapter's scaling * B(A(x)) (rows on no adapter of this layer get the base output), per adapter or stacked."""
    original = layer.forward

    def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        routing = engine._routing
        if engine._row_owner is not None:
            result = layer.base_layer(x, *args, **kwargs)
            stack = engine._stack(layer)
            if stack is None:
                return result
            low = torch.nn.functional.linear(x.to(stack.a.dtype), stack.a) * engine._mask(stack)
            return result + torch.nn.functional.linear(low, stack.b).to(result.dtype)
        if routing is None:
            return original(x, *args, **kwargs)
        result = layer.base_layer(x, *args, **kwargs)
        for name, rows in routing:
            if name not in layer.lora_A:
                continue
            lora_a, lora_b = layer.lora_A[name], layer.lora_B[name]
            delta = lora_b(lora_a(x.index_select(0, rows).to(lora_a.weight.dtype))) * layer.scaling[name]
            result.index_add_(0, rows, delta.to(result.dtype))
        return result

    return forward


class AdapterEngine(Protocol):
    """What an `AdapterView` needs of its engine: `MultiLoraEngine` here, `VLLMMultiLoraEngine` (vllm_multi_lora.py)."""

    versions: dict[str, int]  # attached adapter name -> weights version loaded into it (0: none yet)
    model_dir: Path | None
    tokenizer: Any
    partial_rollouts_default: bool  # GenerationEngine's: the engine's in-flight default for unset partial_rollouts

    @property
    def records_versions(self) -> bool:
        """True: a new version applies to rows in flight (hf); False: from the next admission (vLLM)."""

    def load_adapter(self, name: str, version: int, state_dict: dict[str, Any], origin: str) -> None: ...


class AdapterView:
    """One attached adapter, as an instance loop and its weight transport see an engine."""

    def __init__(self, engine: AdapterEngine, name: str) -> None:
        self.engine, self.name = engine, name
        self.model_dir = engine.model_dir
        self.tokenizer = engine.tokenizer
        self.records_versions = engine.records_versions
        self.partial_rollouts_default = engine.partial_rollouts_default

    @property
    def version(self) -> int:
        return self.engine.versions.get(self.name, 0)

    def update_weights(self, version: int, source: str | Path) -> None:
        self.engine.load_adapter(self.name, version, lora_io.read_adapter(source), origin=str(source))

    def load_tensors(self, version: int, state_dict: dict[str, Any], origin: str = "the transport") -> None:
        self.engine.load_adapter(self.name, version, state_dict, origin)
