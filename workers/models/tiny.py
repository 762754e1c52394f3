"""Tiny models built locally, saved in Hugging Face format.

`build_tiny_model("tiny-1m", out_dir)` writes config.json, generation_config.json, model.safetensors and the
tokenizer's files; `AutoModelForCausalLM.from_pretrained(out_dir)` and `AutoTokenizer.from_pretrained(out_dir)` load
them offline (and so does vLLM). The `tiny-*` presets are Llama models with the character-level tokenizer; the
`chat-*` presets are Llama or Qwen2 models with a byte-level BPE tokenizer, a chat template and a generation config
that stops on two EOS ids (workers/models/bpe.py): the path a real Hugging Face checkpoint takes. Weights are random
(seeded); the SFT warm start (workers/training/sft.py) turns them into a model that emits the task's format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, PretrainedConfig, Qwen2Config

from workers.models.bpe import FAMILIES, VOCAB_SIZE, build_bpe_tokenizer, stop_token_ids
from workers.models.tokenizer import build_char_tokenizer, char_vocab


@dataclass(frozen=True)
class TinyPreset:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    num_kv_heads: int | None = None  # None: same as num_heads (no GQA)
    family: str | None = None  # None: Llama + character tokenizer; else a chat family of workers/models/bpe.py


# head_dim 64 everywhere: a size every attention backend (sdpa, vLLM CPU/GPU kernels) supports.
PRESETS: dict[str, TinyPreset] = {
    "tiny-1m": TinyPreset(hidden_size=128, num_layers=5, num_heads=2, intermediate_size=384),
    "tiny-5m": TinyPreset(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=688),
    "tiny-15m": TinyPreset(hidden_size=384, num_layers=8, num_heads=6, intermediate_size=1024),
    "tiny-100m": TinyPreset(hidden_size=768, num_layers=14, num_heads=12, intermediate_size=2048),  # weight-sync bench
    "chat-llama-1m": TinyPreset(hidden_size=128, num_layers=4, num_heads=2, intermediate_size=384, family="llama"),
    "chat-qwen2-1m": TinyPreset(hidden_size=128, num_layers=4, num_heads=2, intermediate_size=384, num_kv_heads=1,
                                family="qwen2"),
    "chat-llama-5m": TinyPreset(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=688, family="llama"),
    "chat-qwen2-100m": TinyPreset(hidden_size=768, num_layers=14, num_heads=12, intermediate_size=2048, num_kv_heads=2,
                                  family="qwen2"),  # a chat call that costs what a small real model's does (benches)
}


def tiny_config(preset: str, *, max_position_embeddings: int = 1024) -> PretrainedConfig:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    p = PRESETS[preset]
    sizes: dict[str, Any] = dict(
        hidden_size=p.hidden_size, intermediate_size=p.intermediate_size, num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads, num_key_value_heads=p.num_kv_heads or p.num_heads,
        head_dim=p.hidden_size // p.num_heads, max_position_embeddings=max_position_embeddings, rms_norm_eps=1e-5,
        tie_word_embeddings=False, dtype="float32")
    if p.family is None:
        vocab = char_vocab()
        return LlamaConfig(vocab_size=len(vocab), pad_token_id=vocab["<pad>"], bos_token_id=vocab["<bos>"],
                           eos_token_id=vocab["<eos>"], **sizes)
    specials = FAMILIES[p.family].specials  # ids 0.. (bpe.py trains them first)
    eos = specials.index(FAMILIES[p.family].eos)
    if p.family == "llama":
        return LlamaConfig(vocab_size=VOCAB_SIZE, bos_token_id=0, eos_token_id=eos, **sizes)
    return Qwen2Config(vocab_size=VOCAB_SIZE, eos_token_id=eos, pad_token_id=0, use_sliding_window=False, **sizes)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_tiny_model(preset: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Create a randomly initialised tiny model + its tokenizer in `out_dir` (created if missing); return it."""
    config = tiny_config(preset)
    family = PRESETS[preset].family
    tokenizer = build_char_tokenizer() if family is None else build_bpe_tokenizer(family)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model: Any = AutoModelForCausalLM.from_config(config)
    eos: int | list[int] = config.eos_token_id if family is None else stop_token_ids(tokenizer, family)
    assert tokenizer.eos_token_id == (eos if isinstance(eos, int) else eos[0]), "config and tokenizer agree on EOS"
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=eos, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
