"""`vllm` agrees with `hf`: same greedy tokens and logprobs on the same tiny model; in-place weight reload.

Needs vLLM (scripts/install_vllm.sh installs the CPU build); skipped with the reason when it is not importable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from contract.spec import GenerationSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine
from workers.runtime.inflight import in_flight_updates

from .conftest import VLLM_ONLY

pytestmark = VLLM_ONLY

PROMPTS = ["12+35=", "rep 3 ab:", "x", "hello world, this is long", "7*8=", "abc"]


@pytest.fixture(scope="module")
def vllm_engine(model_dir: Path) -> Iterator[Any]:
    engine = setup_engine("vllm", model_dir=model_dir, max_batch_size=4, max_model_len=256)
    yield engine
    del engine


def make_requests(hf: HFEngine, sampling: SamplingParams) -> list[GenerationRequest]:
    return [GenerationRequest(str(i), hf.encode(p), sampling) for i, p in enumerate(PROMPTS)]


def test_vllm_greedy_matches_hf(vllm_engine: Any, model_dir: Path) -> None:
    hf = HFEngine(model_dir, max_batch_size=4)
    requests = make_requests(hf, SamplingParams(temperature=0, max_tokens=24))
    expected = {r.request_id: r for r in hf.generate_stream(requests)}
    got = {r.request_id: r for r in vllm_engine.generate_stream(requests)}
    assert set(got) == set(expected)
    for rid, want in expected.items():
        assert got[rid].response_ids == want.response_ids, rid
        assert got[rid].text == want.text
        assert got[rid].finish_reason == want.finish_reason == "length"
        assert torch.allclose(torch.tensor(got[rid].logprobs), torch.tensor(want.logprobs), atol=1e-3)


def test_vllm_streams_in_finish_order_and_reloads_weights(vllm_engine: Any, model_dir: Path,
                                                          other_weights_dir: Path) -> None:
    hf = HFEngine(model_dir, max_batch_size=4)
    lengths = [40, 2, 2, 2, 2, 2]
    requests = [GenerationRequest(str(i), hf.encode(p), SamplingParams(temperature=0, max_tokens=n))
                for i, (p, n) in enumerate(zip(PROMPTS, lengths, strict=True))]
    order = [r.request_id for r in vllm_engine.generate_stream(requests)]
    assert order[-1] == "0" and sorted(order) == sorted(r.request_id for r in requests)

    greedy = make_requests(hf, SamplingParams(temperature=0, max_tokens=12))
    before = {r.request_id: r.response_ids for r in vllm_engine.generate_stream(greedy)}
    vllm_engine.update_weights(1, other_weights_dir)
    after = {r.request_id: r.response_ids for r in vllm_engine.generate_stream(greedy)}
    hf.update_weights(1, other_weights_dir)
    assert after != before
    assert after == {r.request_id: r.response_ids for r in hf.generate_stream(greedy)}
    vllm_engine.update_weights(2, model_dir)
    assert vllm_engine.version == 2


def test_vllm_loads_received_tensors_with_its_weight_loader(vllm_engine: Any, model_dir: Path,
                                                            other_weights_dir: Path) -> None:
    """The p2p transport's path: in-memory tensors (HF names) go through vLLM's own loader (`load_tensors`)."""
    from workers.generation.engines.hf import load_safetensors_dir

    hf = HFEngine(model_dir, max_batch_size=4)
    greedy = make_requests(hf, SamplingParams(temperature=0, max_tokens=12))
    tensors = load_safetensors_dir(other_weights_dir)
    vllm_engine.load_tensors(5, tensors)
    hf.load_tensors(5, tensors)
    assert vllm_engine.version == 5
    assert ({r.request_id: r.response_ids for r in vllm_engine.generate_stream(greedy)}
            == {r.request_id: r.response_ids for r in hf.generate_stream(greedy)})
    vllm_engine.load_tensors(6, load_safetensors_dir(model_dir))  # back to the base weights for later tests
    assert vllm_engine.version == 6


def test_vllm_weight_update_in_flight_records_each_tokens_version(vllm_engine: Any, model_dir: Path,
                                                                  other_weights_dir: Path) -> None:
    """A full-weights update between decode steps (async jobs with generation.partial_rollouts): the rows in flight
    go on with the new weights, and each result's version_marks says which version sampled which tokens."""
    hf = HFEngine(model_dir, max_batch_size=4)
    assert vllm_engine.records_versions
    assert in_flight_updates(GenerationSpec(engine="vllm"), vllm_engine)  # unset: vLLM's measured default
    assert not in_flight_updates(GenerationSpec(engine="vllm", partial_rollouts=False), vllm_engine)
    assert not in_flight_updates(GenerationSpec(), hf)  # hf's default: draining
    start = vllm_engine.version
    requests = make_requests(hf, SamplingParams(temperature=0, max_tokens=24))[:3]
    old = {r.request_id: r for r in vllm_engine.generate_stream(requests)}
    assert all(r.version_marks == [[0, start]] for r in old.values())

    def feed() -> Iterator[GenerationRequest | None]:
        yield from requests
        for _ in range(6):  # each None is one decode step on the old weights
            yield None
        vllm_engine.update_weights(start + 1, other_weights_dir)

    got = {r.request_id: r for r in vllm_engine.generate_stream(feed())}
    assert set(got) == set(old)
    for request_id, result in got.items():
        first, second = result.version_marks or []
        cut = second[0]
        assert first == [0, start] and second[1] == start + 1 and 3 <= cut <= 8, result.version_marks
        assert result.response_ids[:cut] == old[request_id].response_ids[:cut]  # sampled by the old weights
    assert any(got[i].response_ids[8:] != old[i].response_ids[8:] for i in got)  # the new weights took over
    vllm_engine.update_weights(start + 2, model_dir)  # back to the base weights for later tests


def test_vllm_chat_models_match_hf_and_stop_on_every_eos(tmp_path_factory: pytest.TempPathFactory) -> None:
    """BPE chat presets (Llama, Qwen2): prompts rendered with the chat template decode to the same greedy tokens on
    both engines; a Qwen2 model whose head makes `<|endoftext|>` (the generation config's second EOS, not the
    tokenizer's) the greedy choice stops there on both."""
    from models.chat_support import CHAT, zero_head
    from transformers import AutoTokenizer

    from workers.core.chat import ChatEncoder
    from workers.models import build_tiny_model

    root = tmp_path_factory.mktemp("vllm-chat")
    for family in ("llama", "qwen2"):
        path = build_tiny_model(f"chat-{family}-1m", root / family, seed=1)
        encode = ChatEncoder(AutoTokenizer.from_pretrained(path))
        prompts = [encode.chat(CHAT)[1], encode.chat([{"role": "user", "content": "rep 3 ab:"}])[1]]
        requests = [GenerationRequest(str(i), p, SamplingParams(temperature=0, max_tokens=10))
                    for i, p in enumerate(prompts)]
        want = {r.request_id: r for r in HFEngine(path, max_batch_size=2).generate_stream(requests)}
        engine = setup_engine("vllm", model_dir=path, max_batch_size=2, max_model_len=256)
        got = {r.request_id: r for r in engine.generate_stream(requests)}
        assert {k: (r.response_ids, r.finish_reason) for k, r in got.items()} == {
            k: (r.response_ids, r.finish_reason) for k, r in want.items()}, family
        del engine
    stopper = zero_head(root / "qwen2", root / "qwen2-zero")
    engine = setup_engine("vllm", model_dir=stopper, max_batch_size=2, max_model_len=256)
    prompt = ChatEncoder(AutoTokenizer.from_pretrained(stopper)).chat(CHAT)[1]
    [result] = engine.generate_stream([GenerationRequest("z", prompt, SamplingParams(temperature=0, max_tokens=8))])
    assert (result.response_ids, result.finish_reason) == ([0], "stop")

