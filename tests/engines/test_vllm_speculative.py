"""vLLM with `generation.speculative: group` (its n-gram speculation): the same greedy tokens and behaviour logprobs
as the hf engine without speculation, and sampled behaviour logprobs that are the target's (a plain forward)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine

from .conftest import VLLM_ONLY

pytestmark = VLLM_ONLY

PROMPTS = ["rep 3 ab:", "abcabcabc", "hello hello hello", "7*8="]


@pytest.fixture(scope="module")
def vllm_engine(model_dir: Path) -> Iterator[Any]:
    engine = setup_engine("vllm", model_dir=model_dir, max_batch_size=4, max_model_len=256, speculative="group")
    yield engine
    del engine


def test_greedy_tokens_and_logprobs_match_hf_without_speculation(vllm_engine: Any, model_dir: Path) -> None:
    hf = HFEngine(model_dir, max_batch_size=4)
    requests = [GenerationRequest(str(i), hf.encode(p), SamplingParams(temperature=0, max_tokens=32))
                for i, p in enumerate(PROMPTS)]
    expected = {r.request_id: r for r in hf.generate_stream(requests)}
    got = {r.request_id: r for r in vllm_engine.generate_stream(requests)}
    assert vllm_engine.llm_kwargs["speculative_config"]["method"] == "ngram"
    for rid, want in expected.items():
        assert got[rid].response_ids == want.response_ids, rid
        assert torch.allclose(torch.tensor(got[rid].logprobs), torch.tensor(want.logprobs), atol=1e-3)


def test_sampled_logprobs_are_the_targets(vllm_engine: Any, model_dir: Path) -> None:
    hf = HFEngine(model_dir, max_batch_size=4)
    requests = [GenerationRequest(str(i), hf.encode(p), SamplingParams(temperature=0.7, max_tokens=24, seed=i))
                for i, p in enumerate(PROMPTS)]
    assert hf.model is not None
    for result in vllm_engine.generate_stream(requests):
        ids = torch.tensor([result.prompt_ids + result.response_ids])
        with torch.no_grad():
            logits = hf.model(ids).logits[0, len(result.prompt_ids) - 1: -1] / 0.7
        want = logits.log_softmax(-1).gather(-1, torch.tensor(result.response_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(result.logprobs), want, atol=1e-3), result.request_id
