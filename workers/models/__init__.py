"""Tiny local models: `tiny-*` (Llama, character tokenizer) and `chat-*` (Llama or Qwen2, BPE + chat template)."""

from workers.models.tiny import PRESETS, build_tiny_model, count_parameters, tiny_config
from workers.models.tokenizer import build_char_tokenizer, char_vocab

__all__ = ["PRESETS", "build_char_tokenizer", "build_tiny_model", "char_vocab", "count_parameters", "tiny_config"]
