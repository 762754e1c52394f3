"""Grouped speculative decoding in the hf engine (engines/hf_speculative.py, suffix_draft.py): with speculation the
engine emits exactly the tokens it emits without (greedy, and seeded sampling: each emitted token consumes one
uniform), for batches mixing long and short rows with retirements and splices, mixed LoRA adapters and weight
updates between steps; unseeded sampling keeps the token distribution (chi-square); behaviour logprobs are a plain
forward pass's. Every comparison also checks that drafts were accepted, so the speculative path really ran."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from scipy.stats import chi2_contingency
from transformers import DynamicCache

from contract.sample import PromptRequest
from contract.spec import JobSpec
from workers.core import to_sample
from workers.generation.engine import GenerationRequest, GenerationResult, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.generation.engines.hf_multi_lora import MultiLoraEngine
from workers.generation.engines.hf_speculative import StepCost, best_k, speculation_for
from workers.generation.engines.suffix_draft import SuffixDrafter
from workers.rewards import RewardOutcome
from workers.runtime.metrics import sample_metrics

from .conftest import LORA, random_adapter

PROMPTS = ["hello world", "abc", "the quick brown fox", "7*8="]  # 4 groups


def group_requests(engine: HFEngine, sampling: SamplingParams, per_group: int = 4) -> list[GenerationRequest]:
    """`per_group` samples of each prompt, lengths from 6 to 50 tokens (long and short rows in one batch)."""
    out = []
    for g, prompt in enumerate(PROMPTS):
        for s in range(per_group):
            seeded = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p, seed=1000 * g + s,
                                    max_tokens=6 + (11 * (g + 3 * s)) % 45)
            out.append(GenerationRequest(f"{g}-{s}", engine.encode(prompt), seeded))
    return out


def speculating(engine: HFEngine, on: bool = True) -> HFEngine:
    """Speculation at every step, whole drafts (the default speculates only in the tail, a quarter of the batch or
    fewer, with the draft length that pays: tests of the choice below)."""
    engine.speculation = speculation_for("group" if on else "off", engine.max_batch_size,
                                         max_rows=engine.max_batch_size, paced=False)
    engine.drafter = SuffixDrafter()
    return engine


def run(engine: HFEngine, requests: list[GenerationRequest], speculative: bool, **kwargs: object
        ) -> dict[str, GenerationResult]:
    speculating(engine, speculative)
    return {r.request_id: r for r in engine._batcher(**kwargs).run(iter(requests))}


def assert_same(plain: dict[str, GenerationResult], spec: dict[str, GenerationResult]) -> None:
    assert plain.keys() == spec.keys()
    for key, result in plain.items():
        assert spec[key].response_ids == result.response_ids, key
        assert spec[key].finish_reason == result.finish_reason
        assert spec[key].version_marks == result.version_marks
        assert spec[key].logprobs == pytest.approx(result.logprobs, abs=1e-4)
    accepted = sum(r.accepted_tokens for r in spec.values())
    tokens = sum(len(r.response_ids) for r in spec.values())
    assert accepted > 0 and tokens / sum(r.forward_passes for r in spec.values()) > 1.0
    assert all(r.forward_passes == len(r.response_ids) for r in plain.values())  # one token per pass without


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0), SamplingParams(temperature=0.5, top_p=0.9)],
                         ids=["greedy", "seeded-sampling"])
def test_same_tokens_with_retirements_and_splices(model_dir: Path, sampling: SamplingParams) -> None:
    """Batch of 5 for 16 requests of mixed lengths: rows retire and new ones splice in while others hold holes."""
    engine = HFEngine(model_dir, max_batch_size=5)
    requests = group_requests(engine, sampling)
    assert_same(run(engine, requests, False), run(engine, requests, True, min_free_slots=1))


def test_same_tokens_on_mixed_lora_rows(model_dir: Path) -> None:
    engine = MultiLoraEngine(model_dir, max_batch_size=6)
    for name, seed in (("a", 1), ("b", 2)):
        engine.attach(name, LORA).load_tensors(1, random_adapter(model_dir, seed))
    requests = group_requests(engine, SamplingParams(temperature=0))
    for i, request in enumerate(requests):
        request.adapter = "ab"[i % 2]
    assert_same(run(engine, requests, False), run(engine, requests, True))


def switched_greedy(old: HFEngine, new: HFEngine, prompt: list[int], response: list[int], switch: int) -> list[int]:
    """Greedy continuation after token `switch` when the weights changed there: the cache of the prompt and the
    first switch - 1 response tokens from the old weights, every later forward on the new ones."""
    cache = DynamicCache(config=old.model.config)
    with torch.no_grad():
        old.model(torch.tensor([prompt + response[:switch - 1]]), past_key_values=cache, use_cache=True)
        out, last = [], response[switch - 1]
        for _ in range(len(response) - switch):
            logits = new.model(torch.tensor([[last]]), past_key_values=cache, use_cache=True).logits[0, -1]
            last = int(logits.argmax())
            out.append(last)
    return out


def test_weight_updates_between_steps(model_dir: Path, other_weights_dir: Path) -> None:
    """Weights v1 load after the third result while the other rows keep decoding (and drafting) in flight. The
    switch lands at another token index than without speculation (a step emits several tokens), so each row is
    checked against its own switch: the tokens before it are v0's greedy output, those after it the greedy
    continuation on v1 over v0's cache."""
    engine = speculating(HFEngine(model_dir, max_batch_size=6))
    requests = group_requests(engine, SamplingParams(temperature=0))
    plain = run(HFEngine(model_dir, max_batch_size=6), requests, False)
    results: dict[str, GenerationResult] = {}
    for result in engine.generate_stream(iter(requests)):
        results[result.request_id] = result
        if len(results) == 3:
            engine.update_weights(1, other_weights_dir)
    old, new = HFEngine(model_dir), HFEngine(other_weights_dir)
    spanning = [r for r in results.values() if len(r.version_marks or []) == 2]
    assert spanning and sum(r.accepted_tokens for r in results.values()) > 0
    plain_new = run(HFEngine(other_weights_dir, max_batch_size=6), requests, False)  # rows admitted after it
    for result in results.values():
        assert result.version_marks is not None
        if result.version_marks[0][1] == 1:
            assert result.response_ids == plain_new[result.request_id].response_ids
            continue
        switch = result.version_marks[1][0] if len(result.version_marks) == 2 else len(result.response_ids)
        assert result.response_ids[:switch] == plain[result.request_id].response_ids[:switch]
        if switch < len(result.response_ids):
            assert result.response_ids[switch:] == switched_greedy(old, new, result.prompt_ids, result.response_ids,
                                                                   switch)


def test_behaviour_logprobs_are_a_forward_pass(model_dir: Path) -> None:
    engine = HFEngine(model_dir, max_batch_size=8)
    results = run(engine, group_requests(engine, SamplingParams(temperature=0.5)), True)
    assert sum(r.accepted_tokens for r in results.values()) > 0
    assert engine.model is not None
    for result in results.values():
        ids = torch.tensor([result.prompt_ids + result.response_ids])
        with torch.no_grad():
            logits = engine.model(ids).logits[0, len(result.prompt_ids) - 1: -1] / 0.5
        want = logits.log_softmax(-1).gather(-1, torch.tensor(result.response_ids)[:, None]).squeeze(-1)
        assert result.logprobs == pytest.approx(want.tolist(), abs=1e-4)


def test_sampled_distribution_is_unchanged(model_dir: Path) -> None:
    """2,000 unseeded samples of one prompt x 10 tokens (20,000 sampled steps) per arm, different generators: the
    distribution of the token at each of a few positions passes a chi-square test (samples are independent across
    sequences; seeds are fixed, so the test is deterministic)."""
    positions = (1, 5, 9)
    counts: dict[bool, list[dict[int, int]]] = {}
    for speculative, seed in ((False, 11), (True, 12)):
        engine = speculating(HFEngine(model_dir, max_batch_size=64, seed=seed, ignore_eos=True), speculative)
        prompt = engine.encode("hello")
        requests = [GenerationRequest(str(i), prompt, SamplingParams(temperature=0.5, max_tokens=10))
                    for i in range(2000)]
        results = list(engine.generate_stream(iter(requests)))
        if speculative:
            assert sum(r.accepted_tokens for r in results) > 0.1 * sum(r.draft_tokens for r in results) > 0
        counts[speculative] = [{} for _ in positions]
        for result in results:
            for table, at in zip(counts[speculative], positions, strict=True):
                table[result.response_ids[at]] = table.get(result.response_ids[at], 0) + 1
    for at, plain, spec in zip(positions, counts[False], counts[True], strict=True):
        tokens = sorted(set(plain) | set(spec), key=lambda t: -(plain.get(t, 0) + spec.get(t, 0)))
        frequent = [t for t in tokens if plain.get(t, 0) + spec.get(t, 0) >= 10]
        rare = [t for t in tokens if t not in frequent]
        table = [[sum(arm.get(t, 0) for t in rare), *(arm.get(t, 0) for t in frequent)] for arm in (plain, spec)]
        if table[0][0] + table[1][0] == 0:
            table = [row[1:] for row in table]
        assert chi2_contingency(table).pvalue > 0.01, (at, table)


def test_iteration_metrics_report_acceptance_and_tokens_per_forward(model_dir: Path) -> None:
    engine = HFEngine(model_dir, max_batch_size=8)
    requests = group_requests(engine, SamplingParams(temperature=0))

    def metrics(speculative: bool) -> dict[str, float]:
        samples = [to_sample(PromptRequest(sample_id=r.request_id, group_id=r.request_id[0], prompt_id="p",
                                           iteration=1, prompt_ids=r.prompt_ids), r, RewardOutcome(0.0), job_id=1,
                             version=0, instance_id="gen-0")
                   for r in run(engine, requests, speculative).values()]
        return sample_metrics(samples, train_version=0)

    plain, spec = metrics(False), metrics(True)
    assert plain["tokens_per_forward"] == 1.0 and "spec_acceptance" not in plain
    assert "tail_tokens_per_forward" not in plain
    assert spec["tokens_per_forward"] > 1.0 and 0 < spec["spec_acceptance"] <= 1
    assert spec["tail_tokens_per_forward"] >= spec["tokens_per_forward"]  # every pass speculated here
    assert plain["tail_phase_seconds"] >= 0 and spec["tail_phase_seconds"] >= 0


def test_job_spec_setting_reaches_the_engine(model_dir: Path) -> None:
    """`generation.speculative`: group speculates in the tail (a quarter of the batch), off never, auto (default) as
    the engine's measured default (hf: group, docs/operator.md)."""
    base = {"name": "j", "model": "m", "dataset": {"builtin": "long_tail"}}
    assert HFEngine.speculative_default == "group"
    for mode, rows in (("auto", 16), ("group", 16), ("off", 0)):
        spec = JobSpec.model_validate({**base, "generation": {"batch_size": 64, "speculative": mode}})
        engine = HFEngine.from_spec(spec, model_dir, "cpu")
        assert engine.speculation.max_rows == rows and engine.speculation.enabled == (rows > 0)
    assert JobSpec.model_validate(base).generation.speculative == "auto"
    shared = MultiLoraEngine(model_dir, max_batch_size=64, speculative="auto")  # as workers/runtime/shared.py builds
    assert shared.speculation.enabled and shared.speculation.max_rows == 16  # a shared LoRA instance: speculates


def test_drafts_stop_at_the_models_last_position(model_dir: Path) -> None:
    """Rows end at the model's position limit exactly where they end without speculation (drafts never need a
    position past it)."""
    engine = HFEngine(model_dir, max_batch_size=8)
    requests = group_requests(engine, SamplingParams(temperature=0))
    outputs = {}
    for speculative in (False, True):
        speculating(engine, speculative)
        batcher = engine._batcher()
        batcher.max_positions = 30  # prompts of 4-19 tokens: every long row hits it
        outputs[speculative] = {r.request_id: (r.response_ids, r.finish_reason) for r in batcher.run(iter(requests))}
    assert outputs[True] == outputs[False]
    assert all(len(r.prompt_ids) + len(outputs[True][r.request_id][0]) <= 30 for r in requests)
    assert sum(reason == "length" for _, reason in outputs[True].values()) >= 8


def test_paced_k_pays_only_where_the_extra_positions_are_cheap() -> None:
    """The step's draft length from the timed cost a + b * positions and the rows' acceptance: long drafts when
    the fixed cost dominates (few rows), none in a wide batch or when drafts keep failing."""
    cost = StepCost()
    for positions in (1, 4, 16, 64, 128, 64, 16, 4, 1):
        cost.observe(positions, 0.002 + 0.00005 * positions)  # a = 2 ms, b = 0.05 ms a position
    a, b = cost.coefficients()
    assert a == pytest.approx(0.002, rel=1e-6) and b == pytest.approx(0.00005, rel=1e-6)
    assert best_k(cost, [0.9] * 2, [16, 16]) >= 8  # the long tail: drafts nearly free
    assert best_k(cost, [0.6] * 64, [16] * 64) == 0  # a wide batch: each extra position costs b * 64
    assert best_k(cost, [0.6] * 2, [16, 16]) >= 3
    assert best_k(cost, [0.05] * 4, [16] * 4) == 0  # drafts that fail
    assert best_k(cost, [0.9, 0.9], [0, 3]) <= 3  # no longer than the longest draft
    assert 0.02 <= cost.alpha(0, 0) <= 0.98 and cost.alpha(30, 31) > cost.alpha(1, 31)


def test_paced_speculation_runs_in_the_tail_and_keeps_the_tokens(model_dir: Path) -> None:
    """The default (paced, tail only): greedy output equal to a plain run's, and the engine's step timings and
    acceptance are recorded."""
    engine = HFEngine(model_dir, max_batch_size=8)
    requests = group_requests(engine, SamplingParams(temperature=0))
    plain = run(engine, requests, False)
    engine.speculation, engine.drafter = speculation_for("group", 8, max_rows=8), SuffixDrafter()
    paced = {r.request_id: r for r in engine.generate_stream(iter(requests))}
    assert {k: r.response_ids for k, r in paced.items()} == {k: r.response_ids for k, r in plain.items()}
    assert engine.step_cost.w > 0 and engine.step_cost.accepted > 0  # it verified (and accepted) drafts
    assert sum(r.accepted_tokens for r in paced.values()) > 0
