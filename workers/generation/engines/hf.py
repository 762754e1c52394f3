"""`HFEngine`: transformers generation with continuous batching (CPU or GPU).

    engine = setup_engine("hf", model_dir=path, max_batch_size=32, device="cpu")
    for result in engine.generate_stream(requests):   # requests consumed lazily, in the order given
        ...                                          # results arrive in finish order

At most `max_batch_size` sequences are in flight; a sequence that finishes (EOS, stop string, max_tokens) is yielded
at once and its slot refilled from the request iterator, in batches: new requests are pulled once max(1,
max_batch_size // 4) slots are free, so one prefill serves several of them (see hf_batch.py for that and the KV-cache
layout). Logprobs are the behaviour logprobs defined in sampling.py. `generate_padded` is the plain `model.generate`
baseline on padded batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from contract.spec import JobSpec, LoraSpec, SpeculativeMode
from workers.generation.engine import (
    ENGINES,
    GenerationEngine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from workers.generation.engines.hf_batch import ContinuousBatcher
from workers.generation.engines.hf_speculative import StepCost, speculation_for
from workers.generation.engines.profile import profile_ptl
from workers.generation.engines.suffix_draft import SuffixDrafter
from workers.models import lora as lora_io


def load_safetensors_dir(source: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a HF-format directory (model.safetensors or sharded model-*.safetensors)."""
    files = sorted(Path(source).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {source}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    return state


@ENGINES.register("hf", label="transformers", speculative=True)  # generation.speculative: group (hf_speculative.py)
class HFEngine(GenerationEngine):
    """transformers with our own continuous batching; CPU or GPU, fp32 by default (the trainer's logprobs)."""

    records_versions = True  # weights are swapped in place between decode steps; each token's version is recorded
    # Draining at weight updates measured faster than updating in flight (bench/modes.py --partial-rollouts --engine
    # hf, 2 CPU cores: in flight 0.65x before the KV cache kept spare columns, 0.91-0.92x after at 256 tokens, 0.95x
    # at 512 tokens with max_staleness 2, where vLLM gains 1.33x). There the trainer is the bottleneck (0.39-0.42 s
    # of a 0.48-0.57 s iteration) and waits longer in flight (0.09-0.11 s vs 0.04-0.06 s an iteration) for each
    # iteration's longest sample: draining lets that sample finish in near-empty decode steps (PTL(1) = 2.1 ms vs
    # PTL(64) = 4.9 ms, bench/partial_ceiling.py), in flight the rows admitted beside it slow its steps. The batch's
    # KV cache is also one right-aligned block (hf_batch.py): a batch that never drains keeps its longest row's
    # width, and every row admitted meanwhile attends over that padding; a paged cache (vLLM) has none.
    partial_rollouts_default = False
    # `generation.speculative: auto`: group. Grouped speculation (hf_speculative.py) runs only in the tail (a quarter of
    # the batch still decoding) and is paced by the step's measured cost and the rows' acceptance, so a step that
    # would not pay is a plain one. bench/speculative.py (tiny-1m, 2 CPU cores, generation-bound long_tail shape,
    # three runs): the tail 2.0-2.2x the tokens/s, the generation process's CPU per iteration 1.7-2.0x lower in every
    # run, end to end sync 1.31x / 1.60x / 1.53x and async 1.45x / 1.14x / 1.55x (medians; async rounds 0.93-2.90x:
    # once generation is fast an async iteration is trainer-bound and follows the trainer's share of the machine).
    # Where the trainer bounds the iteration (the built-in long_tail, async) it neither gains nor loses (0.97x).
    # docs/operator.md#speculative-decoding. Set `off` to compare.
    speculative_default: SpeculativeMode = "group"

    @classmethod
    def from_spec(cls, spec: JobSpec, model_dir: Path, device: str) -> HFEngine:
        return cls(model_dir, max_batch_size=spec.generation.batch_size, seed=spec.seed, device=device,
                   dtype=spec.generation.dtype,
                   lora=spec.training.lora,  # lora: the base model plus each published adapter
                   speculative=spec.generation.speculative)

    def __init__(self, model_dir: str | Path | None = None, *, max_batch_size: int = 32, device: str = "cpu",
                 dtype: str = "float32", seed: int = 0, ignore_eos: bool = False, lora: LoraSpec | None = None,
                 speculative: SpeculativeMode = "off") -> None:
        """`lora`: serve a LoRA job: the base model wrapped once with an adapter of that shape, whose tensors each
        weight version replaces in place (the base model is never reloaded). `speculative`: grouped speculative
        decoding (hf_speculative.py; `generation.speculative`)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 (got {max_batch_size})")
        self.max_batch_size = max_batch_size
        self.device = torch.device(device)
        if dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16 (got {dtype!r})")
        self.dtype = getattr(torch, dtype)
        self.seed_rng = random.Random(seed)
        self.ignore_eos = ignore_eos  # benchmarks/profiling: run every request to max_tokens
        self.lora = lora
        self.speculation = speculation_for(self.speculative_default if speculative == "auto" else speculative,
                                           max_batch_size)
        self.drafter = SuffixDrafter()  # the prompt groups' suffix indexes, kept across generate_stream calls
        self.step_cost = StepCost()  # timings of its decode steps (when to speculate, hf_speculative.py)
        self.adapted: Any = None  # LoRA: the peft wrapper of `model` (its adapter layers are injected into `model`)
        self.model: Any = None  # a transformers causal LM (typed loosely: transformers' stubs are partial)
        self.tokenizer: Any = None
        self.eos_ids: set[int] = set()
        if model_dir is not None:
            self.load(model_dir)

    def load(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype)
        if self.lora is not None:  # B = 0 until the first version arrives: exactly the base model
            self.adapted = lora_io.wrap(model, self.lora)
            model = self.adapted.get_base_model()
        self.model = model.to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())
        self.version = 0

    def update_weights(self, version: int, source: str | Path) -> None:
        """Copy the weights in `source` into the loaded model in place. May be called between results of a running
        `generate_stream`: sequences still in flight continue on the new weights (their KV cache is kept, and each
        result's `version_marks` says where its tokens switched versions). A LoRA
        version's directory holds the adapter alone."""
        if self.lora is not None:
            self.load_tensors(version, lora_io.read_adapter(source), origin=str(source))
            return
        self.load_tensors(version, load_safetensors_dir(source), origin=str(source))

    def load_tensors(self, version: int, state_dict: dict[str, Any], origin: str = "the transport") -> None:
        """Copy tensors into the loaded model in place (same guarantees as `update_weights`)."""
        model = self._require_model()
        if self.adapted is not None:
            if not lora_io.is_adapter(state_dict):
                raise ValueError(f"weights from {origin} are not a LoRA adapter, but this engine serves a LoRA job")
            lora_io.load_adapter(self.adapted, state_dict)
            self.version = version
            return
        missing, unexpected = model.load_state_dict(state_dict, strict=False)
        tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise ValueError(f"weights from {origin} do not match the model: missing={sorted(set(missing) - tied)} "
                             f"unexpected={sorted(unexpected)}")
        self.version = version

    def generate_stream(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationResult]:
        yield from self._batcher().run(requests)

    def encode(self, text: str) -> list[int]:
        assert self.tokenizer is not None, "call load() first"
        return list(self.tokenizer(text)["input_ids"])

    def profile_ptl(self, batch_sizes: Iterable[int], tokens: int = 32, prompt_len: int = 8) -> dict[int, float]:
        """Seconds per decode step at each batch size (see engines/profile.py)."""
        return profile_ptl(self, batch_sizes, tokens=tokens, prompt_len=prompt_len)

    @torch.no_grad()
    def generate_padded(self, prompts: list[list[int]], sampling: SamplingParams, batch_size: int) -> list[list[int]]:
        """Baseline: plain `model.generate` on left-padded static batches; returns response ids cut after EOS."""
        model = self._require_model()
        pad = int(self.tokenizer.pad_token_id or 0)
        outputs: list[list[int]] = []
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        for at in range(0, len(prompts), batch_size):
            chunk = prompts[at : at + batch_size]
            width = max(len(p) for p in chunk)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=self.device)  # (B, P)
            mask = (torch.arange(width, device=self.device)[None, :] >= (width - torch.tensor(
                [len(p) for p in chunk], device=self.device))[:, None]).long()  # (B, P)
            kwargs = {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p} \
                if sampling.temperature > 0 else {"do_sample": False}
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=sampling.max_tokens,
                                 pad_token_id=pad, eos_token_id=None if self.ignore_eos else sorted(self.eos_ids),
                                 stop_strings=list(sampling.stop) or None, tokenizer=self.tokenizer, **kwargs)
            eos = set() if self.ignore_eos else self.eos_ids
            for row in out[:, width:].tolist():
                cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
                outputs.append(row[:cut])
        return outputs

    def _batcher(self, **routing: Any) -> ContinuousBatcher:
        """`routing`: a multi-adapter engine's `version_of` and `adapters` (hf_multi_lora.py), or any other of the
        batcher's settings (benches); default: every row on this engine's own weights."""
        return ContinuousBatcher(self._require_model(), self.tokenizer, max_batch_size=self.max_batch_size,
                                 eos_ids=self.eos_ids, seed_rng=self.seed_rng, ignore_eos=self.ignore_eos,
                                 **{"min_free_slots": max(1, self.max_batch_size // 4),
                                    "speculation": self.speculation, "drafter": self.drafter,
                                    "step_cost": self.step_cost,
                                    "version_of": lambda adapter: self.version, **routing})

    def _require_model(self) -> Any:
        if self.model is None:
            raise RuntimeError("HFEngine: call load(model_dir) first")
        return self.model
