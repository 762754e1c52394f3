"""Tiny local models: a character-level tokenizer and Llama-architecture presets (tiny-1m, tiny-5m, tiny-15m)."""

from workers.models.tiny import PRESETS, build_tiny_model, count_parameters, tiny_config
from workers.models.tokenizer import build_char_tokenizer, char_vocab

__all__ = ["PRESETS", "build_char_tokenizer", "build_tiny_model", "char_vocab", "count_parameters", "tiny_config"]
