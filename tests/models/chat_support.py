"""Shared by the chat-model tests of both engines (tests/models, tests/engines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "12+35="}]


def zero_head(model_dir: Path, out: Path) -> Path:
    """All logits 0: greedy decoding picks id 0, which for qwen2 is `<|endoftext|>`, the generation config's second
    EOS (the tokenizer's own EOS is `<|im_end|>`)."""
    model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(out)
    state = load_file(out / "model.safetensors")
    state["lm_head.weight"] = torch.zeros_like(state["lm_head.weight"])
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out
