"""`GenerationEngine`: the contract every generation backend (hf, vllm) implements.

See docs/architecture.md#stable-interfaces and docs/architecture.md#stream-generation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.registry import Registry
from contract.spec import JobSpec


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class GenerationRequest:
    request_id: str  # echoed back on the result (the caller maps it to a sample id)
    prompt_ids: list[int]
    sampling: SamplingParams
    meta: dict[str, Any] = field(default_factory=dict)
    # a shared multi-LoRA engine (engines/hf_multi_lora.py): the adapter this request is generated with; None: the
    # engine's own weights
    adapter: str | None = None


@dataclass
class GenerationResult:
    request_id: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]  # behaviour logprob of each response token under the sampling policy's model
    finish_reason: str  # "stop" (EOS or stop string) | "length"
    text: str
    started_at: float
    finished_at: float
    meta: dict[str, Any] = field(default_factory=dict)
    # Temperature the `logprobs` were computed at (the request's temperature; 1.0 for greedy). See
    # workers/generation/engines/sampling.py for the exact definition (temperature-scaled, top-p-filtered).
    logprob_temperature: float = 1.0
    # Which weights version produced which response tokens: [[token_index, version], ...], one mark where the
    # version changes (the first at index 0); token i was sampled by the version of the last mark at or before i.
    # None: the engine does not record versions (its `records_versions` is False).
    version_marks: list[list[int]] | None = None
    # Grouped speculative decoding (engines/hf_speculative.py): forward passes that emitted this response's tokens
    # (prefill included; 0: not recorded), draft tokens verified and accepted, and the passes that verified drafts
    # (the tail's: it emitted accepted_tokens + speculative_passes tokens in them). Tokens per forward: tokens / passes.
    forward_passes: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    speculative_passes: int = 0


class GenerationEngine(ABC):
    """Load a model, keep its weights current, and yield each finished request as soon as it finishes."""

    version: int = 0  # weights version currently loaded
    # True: `update_weights` may be called while requests are in flight (between results of `generate_stream`); they
    # continue on the new weights and each result's `version_marks` says which version sampled which tokens.
    records_versions: bool = False
    # `generation.partial_rollouts` unset (async jobs): in-flight updates where they measured faster than draining
    # for this engine (bench/modes.py --partial-rollouts --engine NAME); draining otherwise.
    partial_rollouts_default: bool = False
    model_dir: Path | None = None  # the directory `load` read (config and tokenizer files of every version)

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: JobSpec, model_dir: Path, device: str) -> GenerationEngine:
        """The engine a job asks for (`generation.*`, `seed`), loaded from `model_dir`, on `device`."""

    @classmethod
    def gpus_per_instance(cls, spec: JobSpec) -> int:
        """GPUs one instance of this engine needs in its worker's device set (tensor parallelism)."""
        return 1

    @abstractmethod
    def load(self, model_dir: str | Path) -> None: ...

    @abstractmethod
    def update_weights(self, version: int, source: str | Path) -> None:
        """Load weights `version` from a HF-format directory `source` in place (no re-creation of the engine)."""

    def load_tensors(self, version: int, state_dict: dict[str, Any]) -> None:
        """Load weights `version` from in-memory tensors (a collective transport). Default: through a temporary HF
        directory of the current model with `update_weights`; engines that can copy in place override it."""
        import tempfile

        from workers.models.weights_file import save_weights

        assert self.model_dir is not None, "load() the engine first"
        with tempfile.TemporaryDirectory(prefix="weights-") as tmp:
            for item in self.model_dir.iterdir():
                if item.is_file() and item.suffix in (".json", ".txt", ".model"):
                    (Path(tmp) / item.name).write_bytes(item.read_bytes())
            save_weights(state_dict, Path(tmp) / "model.safetensors")
            self.update_weights(version, tmp)

    @abstractmethod
    def generate_stream(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationResult]:
        """Continuous batching: consume `requests` lazily as slots free up, yield results in finish order.
        A `None` item means "nothing to admit yet, keep decoding" (a live feed that has no request right now)."""


# name -> engine class; each engine module registers itself (`@ENGINES.register(...)`, contract/registry.py)
ENGINES: Registry[type[GenerationEngine]] = Registry("engine")
