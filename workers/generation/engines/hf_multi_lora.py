"""`MultiLoraEngine`: one base model serving the LoRA adapters of several jobs in the same continuous batch
(shared generation instances: workers/runtime/shared.py, docs/operator.md#shared-generation-instances).

    engine = MultiLoraEngine(model_dir, max_batch_size=128, device="cpu")
    view = engine.attach("j3-gen-0", spec.training.lora)    # a zero adapter (the base model) until a version loads
    transport.load_into(view, version)                       # the job's own transport loads ITS adapter only
    for result in engine.generate_stream(requests):          # each request names its adapter (request.adapter)
        ...
    engine.detach("j3-gen-0")

Each forward pass applies every row's own adapter (peft's mixed-adapter batches: the base layers run once for the
whole batch, each adapter's low-rank product only on its own rows), so N jobs on one base model hold one copy of the
base weights and decode in one batched forward instead of N. An `AdapterView` is what one job's instance loop sees as
its engine: its adapter's version and loading into its adapter, nothing of the others'. Each token's version is its
own adapter's (`version_marks`), so in-flight updates and staleness bounds work per job as on a private instance.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from peft import get_peft_model

from contract.spec import LoraSpec
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.hf_batch import ContinuousBatcher
from workers.models import lora as lora_io

BASE = "__base__"  # peft's name for "no adapter" in a mixed batch


class MultiLoraEngine(HFEngine):
    """The hf engine over a base model that holds one named adapter per attached job instance."""

    def __init__(self, model_dir: str | Path, *, max_batch_size: int, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(model_dir, max_batch_size=max_batch_size, device=device, seed=seed)
        self.versions: dict[str, int] = {}  # adapter name -> weights version loaded into it
        self.peft: Any = None  # the peft wrapper; its adapter layers are injected into `self.model` in place
        self._active: str | None = None  # the adapter peft applies to every row when no per-row names are given

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
        self.peft.eval()  # peft refuses per-row adapters in training mode
        self.versions[name] = 0
        return AdapterView(self, name)

    def detach(self, name: str) -> None:
        """Drop adapter `name` (its rows must have finished). The last one stays loaded, unused: peft keeps one."""
        if self.versions.pop(name, None) is None:
            return
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

    @contextmanager
    def _mixed(self, names: list[str | None]) -> Iterator[None]:
        """One forward pass with each row's adapter. All rows on one adapter (one job on the instance, or one
        job's turn): that adapter made active, the plain forward (peft's per-row routing costs ~40% of a step on
        small models); else peft's mixed batch, hooks set for this pass."""
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
        with self.peft.base_model._enable_peft_forward_hooks(adapter_names=[n or BASE for n in names]):
            yield

    def _batcher(self) -> ContinuousBatcher:
        return ContinuousBatcher(self._require_model(), self.tokenizer, max_batch_size=self.max_batch_size,
                                 eos_ids=self.eos_ids, seed_rng=self.seed_rng, ignore_eos=self.ignore_eos,
                                 min_free_slots=max(1, self.max_batch_size // 4),
                                 version_of=lambda adapter: self.versions.get(adapter, 0) if adapter else 0,
                                 adapters=self._mixed)


class AdapterView:
    """One attached adapter, as an instance loop and its weight transport see an engine."""

    records_versions = True

    def __init__(self, engine: MultiLoraEngine, name: str) -> None:
        self.engine, self.name = engine, name
        self.model_dir = engine.model_dir
        self.tokenizer = engine.tokenizer

    @property
    def version(self) -> int:
        return self.engine.versions.get(self.name, 0)

    def update_weights(self, version: int, source: str | Path) -> None:
        self.engine.load_adapter(self.name, version, lora_io.read_adapter(source), origin=str(source))

    def load_tensors(self, version: int, state_dict: dict[str, Any], origin: str = "the transport") -> None:
        self.engine.load_adapter(self.name, version, state_dict, origin)
