"""Tiny local models for the model-backed graders' tests: a sequence-classification reward model (Llama,
num_labels=1, the chat-llama BPE tokenizer) and a chat judge whose greedy reply is always one digit."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForSequenceClassification

from workers.models import build_tiny_model, tiny_config
from workers.models.bpe import build_bpe_tokenizer

HIGH, LOW = "7", "3"  # the judge's only possible replies


def build_reward_model(out: Path, *, zero_head: bool = False, seed: int = 0) -> Path:
    """A random LlamaForSequenceClassification (num_labels=1); `zero_head`: its logit is 0 for every input."""
    tokenizer = build_bpe_tokenizer("llama")
    config = tiny_config("chat-llama-1m")
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id or tokenizer.eos_token_id
    config.architectures = ["LlamaForSequenceClassification"]
    torch.manual_seed(seed)
    model = LlamaForSequenceClassification(config)
    if zero_head:
        torch.nn.init.zeros_(model.score.weight)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def build_digit_judge(out: Path) -> Path:
    """chat-qwen2-1m rewired so every next token is HIGH or LOW: the final norm keeps hidden dimension 0 only and
    the LM head maps it to +10 x HIGH's logit, -10 x LOW's (every other logit 0), so greedy decoding picks one of
    the two depending on that dimension's sign."""
    build_tiny_model("chat-qwen2-1m", out)
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    (high,), (low,) = tokenizer.encode(HIGH), tokenizer.encode(LOW)
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[high, 0], model.lm_head.weight[low, 0] = 10.0, -10.0
    model.save_pretrained(out, safe_serialization=True)
    return out
