"""Tiny Llama-architecture models built locally, saved in Hugging Face format.

`build_tiny_model("tiny-1m", out_dir)` writes config.json, generation_config.json, model.safetensors and the
character-level tokenizer's files; `AutoModelForCausalLM.from_pretrained(out_dir)` and
`AutoTokenizer.from_pretrained(out_dir)` load them offline (and so does vLLM). Weights are random (seeded);
the SFT warm start (workers/training/sft.py) turns them into a model that emits the task's format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from workers.models.tokenizer import build_char_tokenizer, char_vocab


@dataclass(frozen=True)
class TinyPreset:
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    num_kv_heads: int | None = None  # None: same as num_heads (no GQA)


# head_dim 64 everywhere: a size every attention backend (sdpa, vLLM CPU/GPU kernels) supports.
PRESETS: dict[str, TinyPreset] = {
    "tiny-1m": TinyPreset(hidden_size=128, num_layers=5, num_heads=2, intermediate_size=384),
    "tiny-5m": TinyPreset(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=688),
    "tiny-15m": TinyPreset(hidden_size=384, num_layers=8, num_heads=6, intermediate_size=1024),
    "tiny-100m": TinyPreset(hidden_size=768, num_layers=14, num_heads=12, intermediate_size=2048),  # weight-sync bench
}


def tiny_config(preset: str, *, max_position_embeddings: int = 1024) -> LlamaConfig:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    p = PRESETS[preset]
    vocab = char_vocab()
    return LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_layers,
        num_attention_heads=p.num_heads,
        num_key_value_heads=p.num_kv_heads or p.num_heads,
        head_dim=p.hidden_size // p.num_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<bos>"],
        eos_token_id=vocab["<eos>"],
        dtype="float32",
    )


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_tiny_model(preset: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Create a randomly initialised tiny Llama + char tokenizer in `out_dir` (created if missing); return it."""
    config = tiny_config(preset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    model.save_pretrained(out, safe_serialization=True)
    build_char_tokenizer().save_pretrained(out)
    return out
