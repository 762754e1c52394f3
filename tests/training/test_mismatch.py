"""Training-inference mismatch figures on known logprobs, the sequence-level / masked importance weights, and the
trainer's mismatch metrics and per-token traces on a real tiny model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from training_fixtures import make_group, make_spec

from contract.reporter import JobRecord, MemoryReporter
from contract.sample import Sample
from contract.spec import AlgorithmSpec, JobSpec
from contract.states import JobStatus
from workers.runtime.colocated import LocalRollout
from workers.runtime.context import JobContext
from workers.runtime.driver import Driver
from workers.training.algorithms import LossInputs, setup_algorithm
from workers.training.algorithms.importance import importance_weight
from workers.training.batch import collate, policy_forward
from workers.training.mismatch import mismatch_sums, on_policy_mask
from workers.training.trainer import Trainer

torch.set_num_threads(1)


def k3(delta: float) -> float:
    return math.exp(delta) - 1.0 - delta


def test_mismatch_figures_on_known_logprobs() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])
    behaviour = torch.tensor([[-1.1, -1.0, -0.5], [-3.0, -2.0, 0.0]])
    on_policy = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])  # row 1: one on-policy token, then stale / padding
    figures = mismatch_sums(trainer, behaviour, on_policy, ratio_bound=2.0).metrics()
    deltas = [0.1, -1.0, 0.0, 0.0]  # trainer - behaviour on the four on-policy tokens
    assert figures["mismatch_tokens"] == 4
    assert figures["mismatch_kl"] == pytest.approx(sum(k3(d) for d in deltas) / 4)
    assert figures["mismatch_abs_mean"] == pytest.approx(1.1 / 4)
    assert figures["mismatch_abs_max"] == pytest.approx(1.0)
    assert figures["mismatch_out_fraction"] == pytest.approx(1 / 4)  # exp(-1) < 1/2; exp(0.1) is inside [1/2, 2]
    assert mismatch_sums(trainer, behaviour, torch.zeros_like(on_policy), 2.0).metrics() == {"mismatch_tokens": 0.0}


def test_on_policy_tokens_are_those_of_the_trainers_version() -> None:
    fresh, stale, mixed = (Sample(job_id=1, prompt_id="p", group_id="g", sample_id=name, policy_version=version,
                                  prompt_ids=[1], response_ids=[5, 6, 7], behaviour_logprobs=[-1.0] * 3,
                                  finish_reason="stop", version_marks=marks)
                           for name, version, marks in (("a", 3, None), ("b", 2, None), ("c", 2, [[0, 2], [2, 3]])))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    got = on_policy_mask([fresh, stale, mixed], version=3, mask=mask)
    assert got.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


OLD = torch.log(torch.tensor([[0.3, 0.1, 0.4], [0.5, 0.5, 0.5]]))
BEHAVIOUR = torch.log(torch.tensor([[0.1, 0.2, 0.4], [0.5, 0.25, 0.5]]))
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 1 has two tokens


def weights(**options: object) -> tuple[torch.Tensor, dict[str, float]]:
    return importance_weight(OLD, BEHAVIOUR, MASK, AlgorithmSpec(**options))


def test_token_level_truncated_and_masked_weights() -> None:
    weight, _ = weights(is_cap=2.0)
    assert torch.allclose(weight, torch.tensor([[2.0, 0.5, 1.0], [1.0, 2.0, 0.0]]))  # ratios 3, .5, 1 | 1, 2
    weight, metrics = weights(is_cap=2.0, is_mask=[0.6, 2.5])
    assert torch.allclose(weight, torch.tensor([[0.0, 0.0, 1.0], [1.0, 2.0, 0.0]]))  # 3 > 2.5 and 0.5 < 0.6 dropped
    assert metrics["is_masked_fraction"] == pytest.approx(2 / 5)
    assert metrics["is_weight"] == pytest.approx(4.0 / 5)


def test_sequence_level_truncated_and_masked_weights() -> None:
    # products of the ratios over each sample's real tokens: 3 * 0.5 * 1 = 1.5; 1 * 2 = 2
    weight, _ = weights(is_level="sequence", is_cap=10.0)
    assert torch.allclose(weight, torch.tensor([[1.5, 1.5, 1.5], [2.0, 2.0, 0.0]]))
    weight, _ = weights(is_level="sequence", is_cap=1.8)
    assert torch.allclose(weight, torch.tensor([[1.5, 1.5, 1.5], [1.8, 1.8, 0.0]]))
    weight, metrics = weights(is_level="sequence", is_cap=10.0, is_mask=[0.5, 1.9])
    assert torch.allclose(weight, torch.tensor([[1.5, 1.5, 1.5], [0.0, 0.0, 0.0]]))  # the whole second sample
    assert metrics["is_masked_fraction"] == pytest.approx(2 / 5)


def test_sequence_weight_scales_the_gradient_of_the_decoupled_loss() -> None:
    grpo = setup_algorithm(AlgorithmSpec(name="grpo", is_level="sequence", is_cap=10.0))
    logprobs = OLD.clone().requires_grad_(True)
    inputs = LossInputs(logprobs=logprobs, behaviour_logprobs=BEHAVIOUR, old_logprobs=OLD, mask=MASK,
                        scores=torch.tensor([1.0, 1.0]))
    loss, metrics = grpo.loss(inputs)
    loss.backward()
    # ratio pi_theta / pi_old = 1 (no clip): d loss / d logp_t = -w_seq * A / (real tokens)
    assert logprobs.grad is not None
    assert torch.allclose(logprobs.grad, -torch.tensor([[1.5, 1.5, 1.5], [2.0, 2.0, 0.0]]) / 5)
    assert metrics["is_weight"] == pytest.approx((1.5 * 3 + 2.0 * 2) / 5)


def test_is_mask_must_bracket_one() -> None:
    with pytest.raises(ValueError, match="is_mask"):
        JobSpec.model_validate({"model": "m", "dataset": {"builtin": "arithmetic"},
                                "algorithm": {"is_mask": [1.2, 2.0]}})


def test_trainer_reports_mismatch_of_on_policy_tokens_and_keeps_traces(tiny_model_dir: Path) -> None:
    """Behaviour logprobs = the trainer's own plus a known offset on the fresh samples: mismatch_kl is k3 of that
    offset; stale samples (another version) are left out of the figures."""
    spec = make_spec(name="grpo", mismatch_ratio=1.5)
    trainer = Trainer(tiny_model_dir, spec)
    fresh, stale = make_group("g0", [1.0, 0.0, 0.0, 1.0], seed=1), make_group("g1", [0.0, 1.0, 0.0, 0.5], seed=2)
    batch = collate(fresh + stale, trainer.pad_id)
    with torch.no_grad():
        exact = policy_forward(trainer.model, batch, spec.generation.temperature).logprobs
    for row, sample in enumerate(fresh + stale):
        offset = 0.5 if row % 2 else -0.2  # fresh samples alternate two known offsets
        sample.behaviour_logprobs = [float(v) + offset for v in exact[row, : len(sample.response_ids)]]
    for sample in stale:
        sample.policy_version = -1  # sampled by a version the trainer no longer holds
    trainer.micro_step(fresh)
    trainer.micro_step(stale)
    metrics = trainer.optimizer_step()
    offsets = [(-0.5 if row % 2 else 0.2, len(s.response_ids)) for row, s in enumerate(fresh)]
    tokens = sum(n for _, n in offsets)
    assert metrics["mismatch_tokens"] == tokens
    assert metrics["mismatch_kl"] == pytest.approx(sum(k3(d) * n for d, n in offsets) / tokens, rel=1e-4)
    assert metrics["mismatch_abs_max"] == pytest.approx(0.5, abs=1e-4)
    assert metrics["mismatch_out_fraction"] == pytest.approx(  # |delta| 0.5 > log 1.5; 0.2 is inside
        sum(n for d, n in offsets if abs(d) > math.log(1.5)) / tokens)
    trace = trainer.token_trace(fresh[1])
    assert trace is not None and trace["trained_version"] == 0 and len(trace["pieces"]) == len(fresh[1].response_ids)
    assert trace["current"] == pytest.approx([v - 0.5 for v in fresh[1].behaviour_logprobs], abs=2e-4)
    assert trace["mismatch"] == pytest.approx(k3(-0.5), rel=1e-3)
    assert trainer.token_trace(stale[0])["mismatch"] is None  # type: ignore[index]  # no on-policy token


def _driver_run(model_dir: Path, out: Path, dtype: str) -> MemoryReporter:
    spec = JobSpec.model_validate({
        "model": str(model_dir), "dataset": {"builtin": "arithmetic", "num_prompts": 32},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
        "algorithm": {"name": "grpo", "group_size": 4},
        "generation": {"max_tokens": 4, "batch_size": 16, "dtype": dtype, "speculative": "off"},
        "training": {"iterations": 2, "prompts_per_iteration": 2, "micro_batch_size": 8, "lr": 1e-3,
                     "eval_every": 0},
        "checkpoint": {"interval": 2, "keep": 1},
    })
    reporter = MemoryReporter()
    reporter.add_job(JobRecord(job_id=5, team_id=0, spec=spec, status=JobStatus.running, model_path=None,
                               dataset_path=None))
    ctx = JobContext(job_id=5, team_id=0, spec=spec, model_dir=model_dir, job_dir=out, reporter=reporter, redis=None)
    Driver(ctx, LocalRollout, device="cpu").run()
    return reporter


def test_a_colocated_job_records_mismatch_and_token_traces(tiny_model_dir: Path, tmp_path: Path) -> None:
    """float32 engine and trainer agree to float rounding; a bfloat16 engine's logprobs are measurably off. Every
    stored sample carries its per-token record (trainer logprobs at the version it was trained at)."""
    matched = _driver_run(tiny_model_dir, tmp_path / "fp32", "float32")
    rounded = _driver_run(tiny_model_dir, tmp_path / "bf16", "bfloat16")
    for reporter in (matched, rounded):
        rows = reporter.iterations[5]
        assert sorted(rows) == [1, 2] and all(row["mismatch_tokens"] > 0 for row in rows.values())
        stored = reporter.samples[5]
        assert stored and all(s["tokens"] is not None for s in stored)
        first = stored[0]["tokens"]
        assert len(first["current"]) == len(first["behaviour"]) == len(first["pieces"]) == stored[0]["length"]
        assert first["trained_version"] == stored[0]["iteration"] - 1
    fp32 = max(row["mismatch_kl"] for row in matched.iterations[5].values())
    bf16 = min(row["mismatch_kl"] for row in rounded.iterations[5].values())
    assert fp32 < 1e-8 < bf16 and bf16 > 100 * fp32
    assert all(row["mismatch_abs_max"] > 1e-3 for row in rounded.iterations[5].values())
