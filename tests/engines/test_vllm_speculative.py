"""`generation.speculative: group` is refused with engine vllm, and why: vLLM 0.32's n-gram speculation (the method
that runs on its CPU build) returns 0.0 or NaN as the logprob of accepted draft tokens when sampling, where the
loss needs the target's behaviour logprobs. When a vLLM release fixes that, the vllm test fails: lift the refusal
(the engine's `speculative` registration) and pass the choice to vLLM's `speculative_config`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from contract.spec import JobSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine

from .conftest import VLLM_ONLY

SPEC = {"name": "j", "model": "m", "dataset": {"builtin": "long_tail"}}


def test_spec_refuses_group_with_vllm_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="speculative: 'group' needs engine 'hf'") as caught:
        JobSpec.model_validate({**SPEC, "generation": {"engine": "vllm", "speculative": "group"}})
    assert caught.value.errors()[0]["loc"][:1] == ("generation",)
    for mode in ("auto", "off"):
        assert JobSpec.model_validate({**SPEC, "generation": {"engine": "vllm", "speculative": mode}})
    assert JobSpec.model_validate({**SPEC, "generation": {"speculative": "group"}}).generation.speculative == "group"
    assert JobSpec.model_validate(SPEC).generation.speculative == "auto"


def vllm_only(test):  # type: ignore[no-untyped-def]
    for mark in VLLM_ONLY:
        test = mark(test)
    return test


@vllm_only
def test_vllm_ngram_speculation_loses_sampled_logprobs(model_dir: Path) -> None:
    engine = setup_engine("vllm", model_dir=model_dir, max_batch_size=4, max_model_len=256, speculative_config={
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
    hf = HFEngine(model_dir, max_batch_size=4)
    assert hf.model is not None
    prompts = ["rep 3 ab:", "abcabcabc", "hello hello hello", "7*8="]
    requests = [GenerationRequest(str(i), hf.encode(p), SamplingParams(temperature=0.7, max_tokens=24, seed=i))
                for i, p in enumerate(prompts)]
    wrong = 0
    for result in engine.generate_stream(requests):
        ids = torch.tensor([result.prompt_ids + result.response_ids])
        with torch.no_grad():
            logits = hf.model(ids).logits[0, len(result.prompt_ids) - 1: -1] / 0.7
        want = logits.log_softmax(-1).gather(-1, torch.tensor(result.response_ids)[:, None]).squeeze(-1)
        got = torch.tensor(result.logprobs)
        wrong += int((~torch.isclose(got, want, atol=1e-3)).sum())
    assert wrong > 0, "vLLM's speculation now keeps the target's logprobs: allow generation.speculative with vllm"
