"""Tiny local models: char tokenizer round trips, presets near their names, HF directories load offline."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from workers.models import PRESETS, build_char_tokenizer, build_tiny_model, count_parameters, tiny_config

torch.set_num_threads(1)


def test_char_tokenizer_round_trips_printable_ascii() -> None:
    tok = build_char_tokenizer()
    text = "12+35=47\nrep 3 ab: ababab\t" + string.punctuation + " ~"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and len(ids) == len(text) + 1  # <bos> + one id per character
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok(text, add_special_tokens=False)["input_ids"] == ids[1:]
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.decode([5, 2, 6], skip_special_tokens=True) == tok.decode([5, 6])
    assert tok("é")["input_ids"][1] == tok.unk_token_id


@pytest.mark.parametrize("preset, low, high", [("tiny-1m", 0.8e6, 1.3e6), ("tiny-5m", 4e6, 6e6),
                                               ("tiny-15m", 12e6, 18e6), ("tiny-100m", 90e6, 110e6)])
def test_presets_have_parameter_counts_near_their_names(preset: str, low: float, high: float) -> None:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(tiny_config(preset))
    assert low <= count_parameters(model) <= high
    assert model.config.head_dim == 64 and model.config.model_type == "llama"


def test_unknown_preset_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        tiny_config("huge")
    assert set(PRESETS) == {"tiny-1m", "tiny-5m", "tiny-15m", "tiny-100m", "chat-llama-1m", "chat-qwen2-1m",
                            "chat-llama-5m", "chat-qwen2-100m"}


def test_built_model_loads_offline_and_is_seeded(tmp_path: Path) -> None:
    a = build_tiny_model("tiny-1m", tmp_path / "a", seed=3)
    b = build_tiny_model("tiny-1m", tmp_path / "b", seed=3)
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {
        p.name for p in a.iterdir()}
    model_a: Any = AutoModelForCausalLM.from_pretrained(a, local_files_only=True)
    model_b = AutoModelForCausalLM.from_pretrained(b, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(a, local_files_only=True)
    assert tok.decode(tok("7*8=")["input_ids"], skip_special_tokens=True) == "7*8="
    assert model_a.generation_config.eos_token_id == tok.eos_token_id
    for (name, pa), (_, pb) in zip(model_a.state_dict().items(), model_b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    out = model_a.generate(torch.tensor([tok("1+1=")["input_ids"]]), max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1 and 5 < out.shape[1] <= 5 + 3  # <bos>1+1= then up to 3 new tokens
