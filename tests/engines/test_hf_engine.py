"""HFEngine: continuous batching is exact (greedy == model.generate), streams in finish order, backfills lazily."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine

PROMPTS = ["12+35=", "rep 3 ab:", "x", "hello world, this is long", "7*8=", "abc", "rep 10 q:", "99-1="]


@pytest.fixture()
def engine(model_dir: Path) -> HFEngine:
    engine = setup_engine("hf", model_dir=model_dir, max_batch_size=3, device="cpu")
    assert isinstance(engine, HFEngine)
    return engine


def requests(engine: HFEngine, sampling: list[SamplingParams]) -> list[GenerationRequest]:
    return [GenerationRequest(str(i), engine.encode(p), s, meta={"i": i}) for i, (p, s) in
            enumerate(zip(PROMPTS, sampling, strict=False))]


def reference_greedy(engine: HFEngine, prompt_ids: list[int], n: int) -> list[int]:
    assert engine.model is not None
    ids = torch.tensor([prompt_ids])
    out = engine.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def forward_logprobs(engine: HFEngine, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0):
    assert engine.model is not None
    logits = engine.model(torch.tensor([prompt_ids + response_ids])).logits[0, len(prompt_ids) - 1 : -1]  # (T, V)
    logp = (logits / temperature).log_softmax(-1)
    return logp.gather(-1, torch.tensor(response_ids)[:, None]).squeeze(-1)  # (T,)


def test_greedy_equals_generate_per_prompt_with_backfill(engine: HFEngine) -> None:
    sampling = [SamplingParams(temperature=0, max_tokens=4 + 5 * i) for i in range(len(PROMPTS))]
    results = list(engine.generate_stream(requests(engine, sampling)))
    assert sorted(r.request_id for r in results) == [str(i) for i in range(len(PROMPTS))]
    for r in results:
        assert r.finish_reason == "length"
        assert r.response_ids == reference_greedy(engine, r.prompt_ids, len(r.response_ids))
        assert r.meta["i"] == int(r.request_id)
        assert r.logprob_temperature == 1.0
        assert torch.allclose(torch.tensor(r.logprobs), forward_logprobs(engine, r.prompt_ids, r.response_ids),
                              atol=1e-4)


def test_results_in_finish_order_and_slots_backfilled(engine: HFEngine) -> None:
    # Slot count 2: a long request (40 tokens) stays in flight while short ones cycle through the other slot.
    lengths = [40, 3, 3, 3, 3]
    sampling = [SamplingParams(temperature=0, max_tokens=n) for n in lengths]
    pulled: list[str] = []

    def lazily(reqs: list[GenerationRequest]) -> Iterator[GenerationRequest]:
        for r in reqs:
            pulled.append(r.request_id)
            yield r

    engine.max_batch_size = 2
    stream = engine.generate_stream(lazily(requests(engine, sampling)))
    first = next(stream)
    assert first.request_id == "1"  # the short one started alongside the long one finishes first
    assert pulled == ["0", "1"]  # only as many requests as slots were consumed
    rest = [r.request_id for r in stream]
    assert rest == ["2", "3", "4", "0"]  # backfilled into the freed slot while "0" kept decoding


def test_none_items_mean_nothing_to_admit_yet(engine: HFEngine) -> None:
    reqs = requests(engine, [SamplingParams(temperature=0, max_tokens=3)] * 3)
    results = list(engine.generate_stream([None, reqs[0], None, reqs[1], None, reqs[2]]))
    assert sorted(r.request_id for r in results) == ["0", "1", "2"]


def test_sampled_logprobs_match_temperature_scaled_forward(engine: HFEngine) -> None:
    sampling = [SamplingParams(temperature=0.7, max_tokens=12, seed=i) for i in range(4)]
    for r in engine.generate_stream(requests(engine, sampling)):
        assert r.logprob_temperature == 0.7
        expected = forward_logprobs(engine, r.prompt_ids, r.response_ids, temperature=0.7)
        assert torch.allclose(torch.tensor(r.logprobs), expected, atol=1e-4)


def test_top_p_logprobs_are_renormalised_over_nucleus(engine: HFEngine) -> None:
    sampling = [SamplingParams(temperature=1.0, top_p=0.5, max_tokens=8, seed=i) for i in range(4)]
    for r in engine.generate_stream(requests(engine, sampling)):
        unfiltered = forward_logprobs(engine, r.prompt_ids, r.response_ids)
        assert all(lp <= 0 for lp in r.logprobs)
        assert (torch.tensor(r.logprobs) >= unfiltered - 1e-5).all()  # nucleus mass <= 1 → logprob grows


def test_seed_determinism_independent_of_batch(engine: HFEngine) -> None:
    sampling = [SamplingParams(temperature=1.0, max_tokens=16, seed=7)] * 4
    alone = next(iter(engine.generate_stream(requests(engine, sampling)[:1])))
    together = {r.request_id: r for r in engine.generate_stream(requests(engine, sampling))}
    assert together["0"].response_ids == alone.response_ids
    other_seed = SamplingParams(temperature=1.0, max_tokens=16, seed=8)
    different = next(iter(engine.generate_stream(requests(engine, [other_seed]))))
    assert different.response_ids != alone.response_ids


def test_stop_string_truncates_text_and_finishes(engine: HFEngine) -> None:
    greedy = SamplingParams(temperature=0, max_tokens=20)
    free = next(iter(engine.generate_stream(requests(engine, [greedy, greedy, greedy])[2:])))
    # a two-character stop string whose first occurrence is not at the start
    stop = next(free.text[i : i + 2] for i in range(2, 18) if free.text.find(free.text[i : i + 2]) >= 2)
    cut = free.text.find(stop)
    stopped_params = SamplingParams(temperature=0, max_tokens=20, stop=(stop,))
    stopped = next(iter(engine.generate_stream(requests(engine, [greedy, greedy, stopped_params])[2:])))
    assert stopped.finish_reason == "stop" and cut >= 2
    assert stopped.text == free.text[:cut]
    assert stopped.response_ids == free.response_ids[: cut + len(stop)]  # tokens up to the end of the stop string


def test_eos_finishes_with_stop_and_keeps_the_token(engine: HFEngine) -> None:
    free = next(iter(engine.generate_stream(requests(engine, [SamplingParams(temperature=0, max_tokens=10)]))))
    engine.eos_ids = {free.response_ids[3]}
    stopped = next(iter(engine.generate_stream(requests(engine, [SamplingParams(temperature=0, max_tokens=10)]))))
    first_eos = next(i for i, t in enumerate(free.response_ids) if t in engine.eos_ids)
    assert stopped.finish_reason == "stop"
    assert stopped.response_ids == free.response_ids[: first_eos + 1]


def test_update_weights_changes_outputs_in_place(engine: HFEngine, model_dir: Path, other_weights_dir: Path) -> None:
    greedy = [SamplingParams(temperature=0, max_tokens=12)] * 4
    before = {r.request_id: r.response_ids for r in engine.generate_stream(requests(engine, greedy))}
    model = engine.model
    engine.update_weights(1, other_weights_dir)
    assert engine.version == 1 and engine.model is model
    after = {r.request_id: r.response_ids for r in engine.generate_stream(requests(engine, greedy))}
    assert after != before
    engine.update_weights(2, model_dir)
    again = {r.request_id: r.response_ids for r in engine.generate_stream(requests(engine, greedy))}
    assert again == before


def test_update_weights_rejects_mismatched_checkpoint(engine: HFEngine, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"not.a.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="do not match"):
        engine.update_weights(1, tmp_path)
    with pytest.raises(FileNotFoundError):
        engine.update_weights(1, tmp_path / "missing")


def test_padded_generate_baseline_agrees_on_greedy(engine: HFEngine) -> None:
    reqs = requests(engine, [SamplingParams(temperature=0, max_tokens=10)] * 5)
    padded = engine.generate_padded([r.prompt_ids for r in reqs], SamplingParams(temperature=0, max_tokens=10),
                                    batch_size=5)
    streamed = {r.request_id: r.response_ids for r in engine.generate_stream(reqs)}
    assert padded == [streamed[r.request_id] for r in reqs]


def test_bad_requests_get_clear_errors(engine: HFEngine) -> None:
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        list(engine.generate_stream([GenerationRequest("bad", [], SamplingParams())]))
    with pytest.raises(ValueError, match="max_tokens"):
        list(engine.generate_stream([GenerationRequest("bad", [1, 5], SamplingParams(max_tokens=0))]))
    with pytest.raises(ValueError, match="unknown engine"):
        setup_engine("nope")


def test_profile_ptl_and_no_vllm_import(engine: HFEngine) -> None:
    ptl = engine.profile_ptl([1, 4], tokens=4)
    assert set(ptl) == {1, 4} and all(v > 0 for v in ptl.values())
    if "vllm" not in sys.modules:  # the hf path alone must never import vllm
        setup_engine("hf")
        assert "vllm" not in sys.modules


def test_update_weights_mid_stream_applies_to_later_requests(engine: HFEngine, model_dir: Path,
                                                             other_weights_dir: Path) -> None:
    greedy = SamplingParams(temperature=0, max_tokens=6)
    reqs = requests(engine, [greedy] * 4)
    engine.update_weights(1, other_weights_dir)
    new_policy = {r.request_id: r.response_ids for r in engine.generate_stream(reqs)}
    engine.update_weights(0, model_dir)
    engine.max_batch_size = 1
    stream = engine.generate_stream(reqs)
    first = next(stream)  # request "0" ran entirely on the old weights
    engine.update_weights(1, other_weights_dir)  # async mode: new version lands while the stream is open
    rest = {r.request_id: r.response_ids for r in stream}
    assert first.request_id == "0" and first.response_ids != new_policy["0"]
    assert rest == {rid: ids for rid, ids in new_policy.items() if rid != "0"}
