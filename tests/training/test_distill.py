"""On-policy distillation (workers/training/algorithms/distill.py, workers/runtime/teacher.py): the per-token
advantage against a hand computation, the teacher's scores against the trainer's own logprobs, and a train-local
distillation whose reverse KL to the teacher falls."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from training_fixtures import make_group
from transformers import AutoTokenizer

from contract.sample import Sample
from contract.spec import AlgorithmSpec, JobSpec
from workers.core import make_requests, rollout, sampling_params
from workers.datasets import generate_rows
from workers.generation.engines import setup_engine
from workers.local import train_local
from workers.rewards import build_reward
from workers.runtime.teacher import TeacherScorer
from workers.training.algorithms import LossInputs, setup_algorithm
from workers.training.algorithms.distill import teacher_matrix
from workers.training.batch import collate
from workers.training.sft import sft_warm_start
from workers.training.trainer import Trainer

torch.set_num_threads(1)


def _inputs(behaviour: list[list[float]], teacher: list[list[float]], mask: list[list[float]],
            scores: list[float]) -> LossInputs:
    b = torch.tensor(behaviour)
    return LossInputs(logprobs=b.clone().requires_grad_(), behaviour_logprobs=b, mask=torch.tensor(mask),
                      scores=torch.tensor(scores), teacher_logprobs=torch.tensor(teacher))


def test_the_advantage_is_the_discounted_negative_reverse_kl_less_a_leave_one_out_baseline_plus_the_reward_term(
) -> None:
    nan = float("nan")
    batch = _inputs(behaviour=[[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]], teacher=[[-0.5, -3.0, -0.5], [-3.0, -2.0, nan]],
                    mask=[[1, 1, 1], [1, 1, 0]], scores=[0.25, -0.25])
    spec = AlgorithmSpec(name="distill", teacher="t", kl_discount=0.5, reward_coef=1.0)
    prepared = setup_algorithm(spec).prepare(batch)
    assert prepared.advantages is not None and prepared.reverse_kl is not None
    # k = behaviour - teacher: row 0 [-0.5, 1.0, 0.0], row 1 [2.0, 1.0] (+ padding)
    # G_t = k_t + 0.5 k_{t+1} + 0.25 k_{t+2}: row 0 [0.0, 1.0, 0.0], row 1 [2.5, 1.0]
    # baseline of a row: the mean G over the other row's real tokens (row 0: 1.75; row 1: 1/3)
    expected = [[-(0.0 - 1.75) + 0.25, -(1.0 - 1.75) + 0.25, -(0.0 - 1.75) + 0.25],
                [-(2.5 - 1 / 3) - 0.25, -(1.0 - 1 / 3) - 0.25, 0.0]]
    assert prepared.advantages.tolist() == [pytest.approx(row) for row in expected]
    loss, metrics = setup_algorithm(spec).loss(prepared)
    assert metrics["reverse_kl"] == pytest.approx((-0.5 + 1.0 + 0.0 + 2.0 + 1.0) / 5)  # mean over the 5 real tokens
    loss.backward()  # on-policy (ratio 1): d loss / d logp_t = -A_t / tokens
    grad = batch.logprobs.grad
    assert grad is not None and grad[0].tolist() == pytest.approx([-a / 5 for a in expected[0]], abs=1e-6)
    # scores are `advantages()`' output (0 with reward_coef 0): the teacher's term alone, undiscounted; an unscored
    # sample (no teacher logprobs) has KL 0 and no distillation term (nor is it the other samples' baseline)
    unscored = replace(batch, teacher_logprobs=torch.tensor([[-0.5, -3.0, -0.5], [nan, nan, nan]]),
                       scores=torch.zeros(2))
    undiscounted = setup_algorithm(AlgorithmSpec(name="distill", teacher="t")).prepare(unscored)
    assert undiscounted.advantages is not None and undiscounted.reverse_kl is not None
    assert undiscounted.reverse_kl[1].tolist() == [0.0, 0.0, 0.0]
    assert undiscounted.advantages[0].tolist() == pytest.approx([0.5, -1.0, 0.0])  # no other scored row: no baseline
    assert undiscounted.advantages[1].tolist() == [0.0, 0.0, 0.0]


def test_the_baseline_leaves_the_expected_gradient_unchanged() -> None:
    """Leave-one-out: a sample's baseline is the other samples' mean, so with a constant shift of every k the
    advantages do not change (the common part of the KL is removed) and a lone sample keeps its raw -k."""
    spec = AlgorithmSpec(name="distill", teacher="t")
    rows = [[-1.0, -2.0], [-0.5, -1.5], [-2.0, -0.1]]
    teacher = [[-3.0, -9.0], [-0.5, -4.0], [-8.0, -0.2]]
    base = setup_algorithm(spec).prepare(_inputs(rows, teacher, [[1, 1]] * 3, [0.0] * 3)).advantages
    shifted = setup_algorithm(spec).prepare(
        _inputs(rows, [[t - 7.0 for t in row] for row in teacher], [[1, 1]] * 3, [0.0] * 3)).advantages
    assert base is not None and shifted is not None and torch.allclose(base, shifted)
    lone = setup_algorithm(spec).prepare(_inputs(rows[:1], teacher[:1], [[1, 1]], [0.0])).advantages
    assert lone is not None and lone[0].tolist() == pytest.approx([-2.0, -7.0])


def test_reward_coef_scales_grpos_group_advantage() -> None:
    group = make_group("g", [1.0, 0.0, 0.0, 1.0], seed=1)
    grpo = setup_algorithm(AlgorithmSpec(name="grpo")).advantages(group)
    distill = setup_algorithm(AlgorithmSpec(name="distill", teacher="t", reward_coef=0.5)).advantages(group)
    assert distill == pytest.approx([0.5 * a for a in grpo])
    assert setup_algorithm(AlgorithmSpec(name="distill", teacher="t")).advantages(group) == [0.0] * 4


def test_teacher_matrix_aligns_with_collate_and_old_samples_read_without_teacher() -> None:
    a, b = make_group("g", [1.0, 0.0], seed=2)
    a.teacher_logprobs = [-1.0] * len(a.response_ids)
    matrix = teacher_matrix([a, b], collate([a, b], 0).mask.shape[1])
    assert matrix is not None and matrix[0, : len(a.response_ids)].tolist() == a.teacher_logprobs
    assert torch.isnan(matrix[1]).all()
    assert teacher_matrix([b], 3) is None
    legacy = a.to_json().replace(',"teacher_logprobs":' + str(a.teacher_logprobs).replace(" ", ""), "")
    assert "teacher_logprobs" not in legacy and Sample.from_json(legacy).teacher_logprobs is None


def test_the_teacher_scores_sampled_tokens_as_the_trainer_does(tiny_model_dir: Path) -> None:
    """The student as its own teacher: the teacher's logprobs equal the behaviour logprobs, the reverse KL is 0."""
    spec = JobSpec.model_validate({"model": str(tiny_model_dir), "dataset": {"builtin": "arithmetic"},
                                   "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
                                   "algorithm": {"name": "distill", "teacher": str(tiny_model_dir), "group_size": 4},
                                   "generation": {"max_tokens": 6, "temperature": 0.7}})
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    groups = make_requests(generate_rows("arithmetic", 2, 0), 1, group_size=4,
                           encode=lambda t: tokenizer(t)["input_ids"], job_seed=0, min_version=0)
    engine = setup_engine("hf", model_dir=str(tiny_model_dir), max_batch_size=8)
    samples = rollout(engine, build_reward(spec.reward), [r for g in groups for r in g],
                      sampling_params(spec.generation), job_id=0, instance_id="local")
    TeacherScorer(tiny_model_dir, temperature=0.7).score(samples)
    for sample in samples:
        assert sample.teacher_logprobs == pytest.approx(sample.behaviour_logprobs, abs=1e-4)
    metrics = Trainer(tiny_model_dir, spec).micro_step(samples)
    assert metrics["reverse_kl"] == pytest.approx(0.0, abs=1e-4)


@pytest.mark.slow
def test_train_local_distillation_lowers_the_reverse_kl(tiny_model_dir: Path, tmp_path: Path) -> None:
    # a teacher that answers arithmetic (peaked where the random student is flat), with the student's tokenizer
    teacher = sft_warm_start(tiny_model_dir, tmp_path / "teacher", generate_rows("arithmetic", 256, 1, digits=1),
                             steps=60, batch_size=32, lr=3e-3).model_dir
    spec = JobSpec.model_validate({
        "model": str(tiny_model_dir), "dataset": {"builtin": "arithmetic", "num_prompts": 16},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
        "algorithm": {"name": "distill", "teacher": str(teacher), "group_size": 4},
        "generation": {"max_tokens": 6, "batch_size": 16},
        "training": {"iterations": 10, "prompts_per_iteration": 4, "micro_batch_size": 16, "lr": 1e-2},
        "checkpoint": {"interval": 100},
    })
    result = train_local(spec, tmp_path / "out", eval_every=0)
    kl = [record.metrics["reverse_kl"] for record in result.records]
    assert len(kl) == 10 and all(value == value for value in kl)
    assert sum(kl[-3:]) / 3 < 0.7 * sum(kl[:3]) / 3, kl
