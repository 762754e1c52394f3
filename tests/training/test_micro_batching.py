"""Token-budget micro-batches, bf16 autocast and torch.compile: the same gradients as the padded fp32 eager path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from training_fixtures import make_group, make_spec

from contract.sample import Sample
from contract.spec import JobSpec
from workers.training.batch import padded_tokens, sequence_length, token_budget_batches
from workers.training.trainer import Trainer


def long_tail_samples(steps: tuple[int, ...] = (0, 1, 2, 3)) -> list[Sample]:
    """Groups with very different response lengths, so budget cuts separate short rows from long ones: group n's
    responses grow by 9 x steps[n] tokens per sample (the defaults: 2 .. 83 tokens)."""
    samples = []
    for g, step in enumerate(steps):
        group = make_group(f"g{g}", [1.0, 0.0, 0.5, 0.0], seed=10 + g)
        for index, sample in enumerate(group):
            length = 2 + 9 * step * index
            sample.response_ids = [(7 * i + g + index) % 80 + 4 for i in range(length)]
            sample.behaviour_logprobs = [-4.4 + 0.01 * (i % 7) for i in range(length)]
        samples += group
    return samples


def spec_with(name: str = "grpo", **training: object) -> JobSpec:
    base = make_spec(name=name, kl_coef=0.05, entropy_coef=0.01)
    return base.model_copy(update={"training": base.training.model_copy(update=training)})


def grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.grad is not None}


def close(ours: torch.Tensor | None, reference: torch.Tensor | None, tolerance: float) -> bool:
    """Max abs difference within `tolerance` of the reference's largest entry (float summation order differs)."""
    assert ours is not None and reference is not None
    return float((ours - reference).abs().max()) <= tolerance * max(float(reference.abs().max()), 1e-12)


def test_budget_batches_are_sorted_bounded_and_cover_every_sample() -> None:
    lengths = [30, 3, 8, 120, 5, 7, 31, 4, 29]
    cuts = token_budget_batches(lengths, max_tokens=40, max_rows=4)
    assert sorted(i for cut in cuts for i in cut) == list(range(len(lengths)))
    flat = [lengths[i] for cut in cuts for i in cut]
    assert flat == sorted(lengths)
    for cut in cuts:
        assert len(cut) <= 4
        assert padded_tokens([lengths[i] for i in cut]) <= 40 or len(cut) == 1  # 120 runs alone
    assert [lengths[i] for i in cuts[-1]] == [120]
    assert sum(padded_tokens([lengths[i] for i in cut]) for cut in cuts) < padded_tokens(lengths)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "rloo"])
def test_token_budget_gives_the_padded_gradient(tiny_model_dir: Path, algorithm: str) -> None:
    samples = long_tail_samples()
    assert len(token_budget_batches([sequence_length(s) for s in samples], 96)) >= 4  # really cut
    padded = Trainer(tiny_model_dir, spec_with(algorithm, micro_batch_size=len(samples)))
    budget = spec_with(algorithm, micro_batch_size=len(samples), max_tokens_per_micro_batch=96)
    budgeted = Trainer(tiny_model_dir, budget)
    whole, cut = padded.micro_step(samples), budgeted.micro_step(samples)
    for name in ("loss", "entropy", "kl", "clip_frac", "ratio", "tokens", "samples"):
        assert cut[name] == pytest.approx(whole[name], rel=1e-5, abs=1e-6), name
    reference, ours = grads(padded), grads(budgeted)
    assert reference.keys() == ours.keys()
    for name, grad in reference.items():
        assert close(ours[name], grad, 1e-5), name
    if algorithm == "ppo":
        assert padded.value_head is not None and budgeted.value_head is not None
        assert close(padded.value_head.weight.grad, budgeted.value_head.weight.grad, 1e-5)
    step_whole, step_cut = padded.optimizer_step(), budgeted.optimizer_step()
    assert step_cut["grad_norm"] == pytest.approx(step_whole["grad_norm"], rel=1e-4)
    assert step_cut["loss"] == pytest.approx(step_whole["loss"], rel=1e-5, abs=1e-6)


def test_train_iteration_with_a_budget_cuts_by_tokens(tiny_model_dir: Path) -> None:
    samples = long_tail_samples()
    trainer = Trainer(tiny_model_dir, spec_with(micro_batch_size=4, max_tokens_per_micro_batch=200))
    calls: list[int] = []
    forward_backward = trainer._forward_backward

    def spy(batch: list[Sample], advantages: list[float]) -> dict[str, float]:
        calls.append(padded_tokens([sequence_length(s) for s in batch]))
        assert len(batch) <= 4
        return forward_backward(batch, advantages)

    trainer._forward_backward = spy  # type: ignore[method-assign]
    metrics = trainer.train_iteration(samples)
    assert metrics["samples"] == len(samples)
    longest = max(sequence_length(s) for s in samples)
    assert all(cost <= max(200, longest) for cost in calls)
    assert sum(calls) < padded_tokens([sequence_length(s) for s in samples])


def test_reinforce_pp_refuses_a_token_budget() -> None:
    with pytest.raises(ValidationError, match="reinforce_pp"):
        JobSpec.model_validate(
            {
                "model": "m",
                "dataset": {"builtin": "arithmetic"},
                "algorithm": {"name": "reinforce_pp"},
                "training": {"max_tokens_per_micro_batch": 512},
            }
        )
    JobSpec.model_validate(
        {"model": "m", "dataset": {"builtin": "arithmetic"}, "training": {"max_tokens_per_micro_batch": 512}}
    )


def test_bf16_autocast_stays_near_fp32(tiny_model_dir: Path) -> None:
    samples = long_tail_samples()
    fp32 = Trainer(tiny_model_dir, spec_with(micro_batch_size=len(samples)))
    bf16 = Trainer(tiny_model_dir, spec_with(micro_batch_size=len(samples), bf16_autocast=True))
    a, b = fp32.micro_step(samples), bf16.micro_step(samples)
    assert b["entropy"] == pytest.approx(a["entropy"], rel=2e-2)
    assert b["loss"] == pytest.approx(a["loss"], rel=5e-2, abs=5e-3)
    reference, ours = grads(fp32), grads(bf16)
    assert all(grad.dtype == torch.float32 for grad in ours.values())
    flat_ref = torch.cat([g.flatten() for g in reference.values()])
    flat_ours = torch.cat([ours[name].flatten() for name in reference])
    assert float(torch.nn.functional.cosine_similarity(flat_ref, flat_ours, dim=0)) > 0.99
    assert float((flat_ours - flat_ref).norm() / flat_ref.norm()) < 0.1
    assert not torch.equal(flat_ref, flat_ours)  # autocast really ran in bf16
    fp32.optimizer_step(), bf16.optimizer_step()
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())


@pytest.mark.slow  # inductor compiles C++ kernels: ~1 minute on 2 shared cores
def test_torch_compile_matches_eager(tiny_model_dir: Path) -> None:
    # a second longest group, so the budget cuts 4 micro-batches of 8, 6, 4 and 2 rows: a one-row micro-batch would
    # compile the policy and the reference a second time (dynamic shapes specialise a size of 1), doubling the test
    samples = long_tail_samples(steps=(0, 1, 2, 3, 3))
    cuts = token_budget_batches([sequence_length(s) for s in samples], 256)
    assert sorted(len(cut) for cut in cuts) == [2, 4, 6, 8]
    eager = Trainer(tiny_model_dir, spec_with(micro_batch_size=len(samples), max_tokens_per_micro_batch=256))
    compiled = Trainer(
        tiny_model_dir, spec_with(micro_batch_size=len(samples), max_tokens_per_micro_batch=256, torch_compile=True)
    )
    for _ in range(2):  # second iteration: updated weights, recompiles avoided by dynamic shapes
        a, b = eager.micro_step(samples), compiled.micro_step(samples)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        reference, ours = grads(eager), grads(compiled)
        for name, grad in reference.items():
            assert close(ours[name], grad, 1e-4), name
        eager.optimizer_step(), compiled.optimizer_step()
    assert set(compiled.model.state_dict()) == set(eager.model.state_dict())  # HF names, no _orig_mod prefix
