"""On-policy distillation (workers/training/algorithms/distill.py, workers/runtime/teacher.py): the per-token
advantage and the teacher's top-k term against hand computations, the teacher's scores (and top-k) against the
trainer's own logprobs, samples carrying top-k through JSON, and a train-local distillation whose reverse KL to the
teacher falls."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from training_fixtures import make_group
from transformers import AutoTokenizer

from contract.sample import Sample
from contract.spec import TEACHER_TOPK_DEFAULT, TOPK_COEF_DEFAULT, AlgorithmSpec, JobSpec
from workers.core import make_requests, rollout, sampling_params
from workers.datasets import generate_rows
from workers.generation.engines import setup_engine
from workers.local import train_local
from workers.rewards import build_reward
from workers.runtime.teacher import TeacherScorer
from workers.training.algorithms import LossInputs, setup_algorithm
from workers.training.algorithms.distill import teacher_matrix, teacher_topk_tensors, topk_forward_kl
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


def test_the_topk_term_is_the_forward_kl_over_the_teachers_topk_and_the_rest() -> None:
    """D_t = sum_K p_T (log p_T - log p_S) + p_T(rest) log(p_T(rest) / p_S(rest)), by hand on one position; 0 on a
    position without top-k; its gradient on the full vocabulary's logits; 0 with zero gradient when the student's
    probabilities equal the teacher's on the top-k (whatever its tail looks like)."""
    ninf = -math.inf
    student = torch.tensor([[[math.log(0.25), math.log(0.25)], [-1.0, -2.0]]], requires_grad=True)  # (1, 2, 2)
    teacher = torch.tensor([[[math.log(0.5), math.log(0.3)], [ninf, ninf]]])  # the second position: no top-k
    batch = LossInputs(logprobs=torch.zeros(1, 2, requires_grad=True), behaviour_logprobs=torch.zeros(1, 2),
                       mask=torch.ones(1, 2), scores=torch.zeros(1), teacher_topk_ids=torch.zeros(1, 2, 2).long(),
                       teacher_topk_logprobs=teacher, topk_logprobs=student)
    loss, metrics = setup_algorithm(AlgorithmSpec(name="distill", teacher="t", teacher_topk=2, topk_coef=2.0)).loss(
        batch)
    # tails: teacher 1 - 0.8 = 0.2, student 1 - 0.5 = 0.5
    divergence = 0.5 * math.log(0.5 / 0.25) + 0.3 * math.log(0.3 / 0.25) + 0.2 * math.log(0.2 / 0.5)
    assert metrics["topk_kl"] == pytest.approx(divergence / 2, abs=1e-6)  # the mean over both trained tokens
    assert float(loss.detach()) == pytest.approx(2.0 * divergence / 2, abs=1e-6)  # no advantage: the top-k term alone
    loss.backward()
    # d D / d log p_S(j) = -p_T(j) + p_T(rest) p_S(j) / p_S(rest): -0.5 + 0.2 x 0.5, -0.3 + 0.2 x 0.5; x coef / tokens
    assert student.grad is not None and student.grad[0].tolist() == [pytest.approx([-0.4, -0.2], abs=1e-6), [0, 0]]
    # on the logits z of a 4-token vocabulary: p_S(i) - p_T(i) on the top-k, p_S(i) (1 - p_T(rest) / p_S(rest)) off it
    logits = torch.tensor([0.3, -0.2, 1.0, 0.1], requires_grad=True)
    p_teacher = torch.tensor([0.5, 0.05, 0.3, 0.15])
    ids = torch.tensor([0, 2])
    topk_forward_kl(torch.log_softmax(logits, -1)[ids][None, None], p_teacher[ids].log()[None, None]).sum().backward()
    p_student = torch.softmax(logits.detach(), -1)
    ratio = float(p_teacher[[1, 3]].sum() / p_student[[1, 3]].sum())
    expected = [p_student[0] - 0.5, p_student[1] * (1 - ratio), p_student[2] - 0.3, p_student[3] * (1 - ratio)]
    assert logits.grad is not None and logits.grad.tolist() == pytest.approx([float(v) for v in expected], abs=1e-6)
    # the student equal to the teacher on the top-k (its tail shaped differently): no divergence, no gradient
    equal = torch.tensor([math.log(0.5), math.log(0.3)], requires_grad=True)
    same = topk_forward_kl(equal[None, None], torch.tensor([[[math.log(0.5), math.log(0.3)]]]))
    same.sum().backward()
    assert float(same.detach()) == pytest.approx(0.0, abs=1e-6) and equal.grad is not None
    assert equal.grad.tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_samples_carry_the_teachers_topk_through_json_and_into_aligned_tensors() -> None:
    a, b = make_group("g", [1.0, 0.0], seed=3)
    a.teacher_topk = [[[5, 7], [-0.1, -2.5]]] + [[[], []]] * (len(a.response_ids) - 1)  # the rest: not trained
    again = Sample.from_json(a.to_json())
    assert again == a and again.teacher_topk == a.teacher_topk
    assert Sample.from_json(b.to_json()).teacher_topk is None  # off: absent, and older payloads read as None
    legacy = b.to_json().replace(',"teacher_topk":null', "")
    assert "teacher_topk" not in legacy and Sample.from_json(legacy).teacher_topk is None
    with pytest.raises(AssertionError, match="top-k entry per response token"):
        replace(a, teacher_topk=[[[5], [-0.1]]] * (len(a.response_ids) + 1))
    columns = collate([a, b], 0).mask.shape[1]
    tensors = teacher_topk_tensors([a, b], columns)
    assert tensors is not None and teacher_topk_tensors([b], columns) is None
    ids, logprobs = tensors
    assert ids.shape == logprobs.shape == (2, columns, 2)
    assert ids[0, 0].tolist() == [5, 7] and logprobs[0, 0].tolist() == pytest.approx([-0.1, -2.5])
    assert torch.isinf(logprobs[0, 1:]).all() and torch.isinf(logprobs[1]).all()  # no entry: no term


def test_the_topk_settings_are_checked() -> None:
    assert AlgorithmSpec(name="distill", teacher="t", teacher_topk=4).topk_coef == TOPK_COEF_DEFAULT
    with pytest.raises(ValueError, match="option of algorithm distill"):
        AlgorithmSpec(name="grpo", teacher_topk=TEACHER_TOPK_DEFAULT + 1)
    with pytest.raises(ValueError, match="topk_coef 0"):
        AlgorithmSpec(name="distill", teacher="t", teacher_topk=8, topk_coef=0)
    with pytest.raises(ValueError, match="less than or equal to 64"):
        AlgorithmSpec(name="distill", teacher="t", teacher_topk=65)
    AlgorithmSpec(name="distill", teacher="t", teacher_topk=0, topk_coef=0)  # off
    # unset: the default for distill (written into the spec), nothing for the other algorithms
    assert AlgorithmSpec(name="distill", teacher="t").teacher_topk == TEACHER_TOPK_DEFAULT
    assert AlgorithmSpec(name="grpo").teacher_topk is None and AlgorithmSpec(name="grpo", teacher_topk=0)


def test_the_teacher_scores_sampled_tokens_as_the_trainer_does(tiny_model_dir: Path) -> None:
    """The student as its own teacher: the teacher's logprobs equal the behaviour logprobs, the reverse KL is 0, and
    with teacher_topk its top-k holds the most likely tokens (the sampled one's logprob where it is among them) and the
    top-k term is 0."""
    spec = JobSpec.model_validate({"model": str(tiny_model_dir), "dataset": {"builtin": "arithmetic"},
                                   "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
                                   "algorithm": {"name": "distill", "teacher": str(tiny_model_dir), "group_size": 4,
                                                 "teacher_topk": 4},
                                   "generation": {"max_tokens": 6, "temperature": 0.7}})
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    groups = make_requests(generate_rows("arithmetic", 2, 0), 1, group_size=4,
                           encode=lambda t: tokenizer(t)["input_ids"], job_seed=0, min_version=0)
    engine = setup_engine("hf", model_dir=str(tiny_model_dir), max_batch_size=8)
    samples = rollout(engine, build_reward(spec.reward), [r for g in groups for r in g],
                      sampling_params(spec.generation), job_id=0, instance_id="local")
    TeacherScorer(tiny_model_dir, temperature=0.7, topk=4).score(samples)
    for sample in samples:
        assert sample.teacher_logprobs == pytest.approx(sample.behaviour_logprobs, abs=1e-4)
        assert sample.teacher_topk is not None and len(sample.teacher_topk) == len(sample.response_ids)
        for token, logprob, (ids, values) in zip(sample.response_ids, sample.teacher_logprobs, sample.teacher_topk,
                                                  strict=True):
            assert len(ids) == len(values) == 4 and values == sorted(values, reverse=True)
            assert logprob <= values[0] + 1e-4 and (token not in ids or values[ids.index(token)] == pytest.approx(
                logprob, abs=1e-4))
    metrics = Trainer(tiny_model_dir, spec).micro_step(samples)
    assert metrics["reverse_kl"] == pytest.approx(0.0, abs=1e-4)
    assert metrics["topk_kl"] == pytest.approx(0.0, abs=1e-4)


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
