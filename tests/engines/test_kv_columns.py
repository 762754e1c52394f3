"""The hf engine's KV cache with spare columns: decode steps write in place; the batch is exact whatever the spare."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, MistralConfig, MistralForCausalLM

from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.kv_columns import SpareColumnsCache, SpareColumnsLayer, spare_layers

PROMPTS = ["12+35=", "rep 3 ab:", "x", "hello world, this is long", "7*8="]


def test_decode_steps_write_into_spare_columns_and_grow_only_when_they_run_out() -> None:
    layer = SpareColumnsLayer(min_spare=4, spare_divisor=None)
    prefill = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    layer.update(*prefill)
    buffer = layer.keys.untyped_storage().data_ptr()
    steps = [(torch.randn(2, 3, 1, 8), torch.randn(2, 3, 1, 8)) for _ in range(5)]
    for keys, values in steps[:4]:  # 4 spare columns: no new buffer
        out_keys, _ = layer.update(keys, values)
        assert out_keys.untyped_storage().data_ptr() == buffer
    out_keys, out_values = layer.update(*steps[4])  # the fifth outgrows it: one copy, contents kept
    assert out_keys.untyped_storage().data_ptr() != buffer
    assert torch.equal(out_keys, torch.cat([prefill[0], *(k for k, _ in steps)], dim=2))
    assert torch.equal(out_values, torch.cat([prefill[1], *(v for _, v in steps)], dim=2))
    assert layer.get_seq_length() == 10


def test_row_selection_crop_and_stacking_keep_the_right_aligned_contents() -> None:
    layer, other = SpareColumnsLayer(min_spare=2), SpareColumnsLayer(min_spare=2)
    keys, values = torch.randn(3, 2, 6, 4), torch.randn(3, 2, 6, 4)
    layer.update(keys, values)
    layer.select_rows(torch.tensor([2, 0]), crop=2)
    assert torch.equal(layer.keys, keys[[2, 0], :, 2:]) and torch.equal(layer.values, values[[2, 0], :, 2:])
    short_keys, short_values = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    other.update(short_keys, short_values)
    layer.stack_right_aligned(other)  # 4 columns vs 3: the new row is left-padded with one zero column
    assert layer.keys.shape == (3, 2, 4, 4)
    assert torch.equal(layer.keys[:2], keys[[2, 0], :, 2:])
    assert torch.equal(layer.keys[2:, :, 1:], short_keys) and not layer.keys[2:, :, :1].any()
    assert torch.equal(layer.values[2:, :, 1:], short_values) and not layer.values[2:, :, :1].any()
    step = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
    out_keys, _ = layer.update(*step)
    assert torch.equal(out_keys[:, :, -1:], step[0])


def test_keys_assigned_from_outside_are_adopted() -> None:
    layer = SpareColumnsLayer()
    layer.update(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4))
    layer.batch_select_indices(torch.tensor([1]))  # transformers' own helper assigns plain tensors
    kept = layer.keys.clone()
    step = torch.randn(1, 1, 1, 4), torch.randn(1, 1, 1, 4)
    out_keys, _ = layer.update(*step)
    assert torch.equal(out_keys, torch.cat([kept, step[0]], dim=2))


def test_model_logits_equal_the_dynamic_cache(model_dir: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids, steps = torch.randint(5, 40, (4, 7)), torch.randint(5, 40, (20, 4))
    logits = []
    for cache in (DynamicCache(config=model.config), SpareColumnsCache(model.config, 3, None)):
        out = []
        with torch.no_grad():
            model(input_ids=ids, past_key_values=cache, use_cache=True)
            for i, tokens in enumerate(steps):
                out.append(model(input_ids=tokens[:, None], position_ids=torch.full((4, 1), 7 + i),
                                 attention_mask=torch.ones(4, 8 + i, dtype=torch.long), past_key_values=cache,
                                 use_cache=True).logits)
        logits.append(torch.cat(out))
    assert torch.equal(logits[0], logits[1])


@pytest.mark.parametrize("spare", [(0, None), (1, None), (64, 8)])
def test_continuous_batching_is_exact_whatever_the_spare(model_dir: Path, spare: tuple[int, int | None]) -> None:
    engine = setup_engine("hf", model_dir=model_dir, max_batch_size=2, device="cpu")
    assert isinstance(engine, HFEngine) and engine.model is not None
    requests = [GenerationRequest(str(i), engine.encode(p), SamplingParams(temperature=0, max_tokens=3 + 9 * i))
                for i, p in enumerate(PROMPTS)]
    batcher = engine._batcher(kv_spare=spare)  # 2 slots: rows retire and are spliced in while others decode
    for result in batcher.run(requests):
        ids = torch.tensor([result.prompt_ids])
        expected = engine.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                         max_new_tokens=len(result.response_ids), pad_token_id=0)
        assert result.response_ids == expected[0, len(result.prompt_ids):].tolist()
    assert batcher.decode_steps > 0 and all(isinstance(layer, SpareColumnsLayer) for layer in
                                            spare_layers(batcher.cache))


def test_a_model_with_sliding_window_layers_is_refused_by_name() -> None:
    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=2, head_dim=16, sliding_window=8)
    with pytest.raises(ValueError, match="full attention in every layer.*DynamicSlidingWindowLayer"):
        SpareColumnsCache(MistralForCausalLM(config).config)
