"""On-policy distillation (Agarwal et al. 2024, GKD; Thinking Machines 2025): the student samples, a teacher scores
every sampled token, and the per-token advantage is the negative reverse KL estimate.

For response token y_t of a sample drawn from the student (behaviour policy pi_b) the single-sample estimate of
KL(pi_student || pi_teacher) at position t is

    k_t = log pi_b(y_t) - log pi_teacher(y_t)

(its expectation under pi_b is the reverse KL; `Sample.teacher_logprobs` carries log pi_teacher, scored on the
generation instance by workers/runtime/teacher.py). Token t's advantage is

    G_t = sum_{s >= t} kl_discount^(s - t) k_s
    A_t = -(G_t - b_i)  +  reward_coef * A_group

where b_i, the baseline of sample i, is the mean of G over the real tokens of the *other* samples of the loss batch
(leave-one-out: it does not depend on sample i's tokens, so the gradient's expectation is unchanged), and A_group is
GRPO's group-normalised reward advantage of the sample (0 unless `reward_coef` > 0). Every token still carries its
own advantage (nothing is normalised per group or scaled); the baseline only removes the part of k_t that is common
to all tokens. That part is large where the student is far from the teacher: a fresh student puts ~1/V on every
token, the teacher far less on nearly all of them, so every k_t is ~+7 nats and the sampled-token gradient is mostly
"push this token down" noise around the signal (bench/distill.py, fresh student, lr 3e-3, 3 seeds: mean held-out
0.260 -> 0.729 at iteration 32 with the baseline; docs/tinker.md#distillation-bench). The loss is the clipped
importance-sampled surrogate every algorithm here shares (`base.clipped_policy_loss`), so stale or engine-rounded
behaviour logprobs are corrected as for GRPO. A sample without teacher logprobs (none scored) gets
k_t = 0 and no distillation term (only the reward term). Metric `reverse_kl`: the mean of k_t over the trained
tokens (falls as the student nears the teacher).

Top-k term (`algorithm.teacher_topk` = k > 0, weight `topk_coef`). The sampled-token estimate only learns about the
tokens the student drew: a fresh student must stumble on a digit, then on <eos>, before either is pushed up. With
top-k the teacher also returns its k most likely tokens K_t and their logprobs at every response position
(`Sample.teacher_topk`), and each trained position adds the forward KL from the teacher to the student over the
partition {each j in K_t} + {the rest of the vocabulary, one bucket}:

    D_t = sum_{j in K_t} p_T(j) (log p_T(j) - log p_S(j))  +  p_T(rest) (log p_T(rest) - log p_S(rest))
    p_T(rest) = 1 - sum_{j in K_t} p_T(j),   p_S(rest) = 1 - sum_{j in K_t} p_S(j)

with p_S the current policy (differentiated exactly, not a sampled estimate), both at the generation temperature.
Its gradient on the student's logit z_i is p_S(i) - p_T(i) for i in K_t and p_S(i) - p_T(rest) p_S(i) / p_S(rest)
outside: the full-vocabulary forward KL's gradient with the teacher's tail spread like the student's own. Why this
form and not the top-k renormalised one (p_T / sum_K p_T against the student's unrenormalised p_S): D_t is a true
KL (>= 0, a lower bound of the full forward KL), it is 0 with zero gradient exactly when the student's
probabilities equal the teacher's on K_t, and it does not push the teacher's own tail mass onto K_t (the
renormalised form's minimum is a student sharper than the teacher, and it is -log sum_K p_T > 0 when they are
equal). The loss per token is the sampled-token surrogate + topk_coef x D_t; metric `topk_kl`: the mean D_t over the
trained tokens (0 where a token has no top-k). Only k ids and logprobs per position cross from the teacher.
bench/distill.py (fresh student, lr 3e-3, seeds 0-4 / 5-9): iterations to GRPO's final held-out reward 0.875x / never
without the term, 0.25x / 0.375x with the defaults k 8, topk_coef 10 (docs/tinker.md#the-teachers-top-k).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from contract.sample import Sample
from workers.training.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    LossInputs,
    Metrics,
    add_common_terms,
    clipped_policy_loss,
    masked_mean,
)
from workers.training.algorithms.grpo import GRPO


def teacher_matrix(samples: list[Sample], columns: int) -> Tensor | None:
    """(B, T) teacher logprobs aligned like `collate`'s response columns, NaN where a sample has none (`Distill.prepare`
    then uses its behaviour logprobs: KL 0). None when no sample has any."""
    if all(sample.teacher_logprobs is None for sample in samples):
        return None
    out = torch.full((len(samples), columns), float("nan"))
    for row, sample in enumerate(samples):
        if sample.teacher_logprobs is not None:
            out[row, : len(sample.teacher_logprobs)] = torch.tensor(sample.teacher_logprobs, dtype=torch.float32)
    return out


def teacher_topk_tensors(samples: list[Sample], columns: int) -> tuple[Tensor, Tensor] | None:
    """The samples' `teacher_topk` as (B, T, K) ids (0 where none) and logprobs (-inf where none: an unscored
    sample or position, or past a shorter entry), K the longest entry; None when no sample carries any."""
    if all(sample.teacher_topk is None for sample in samples):
        return None
    width = max((len(entry[0]) for s in samples for entry in s.teacher_topk or ()), default=0)
    ids = torch.zeros((len(samples), columns, max(width, 1)), dtype=torch.long)
    logprobs = torch.full((len(samples), columns, max(width, 1)), -math.inf)
    for row, sample in enumerate(samples):
        for t, (entry_ids, entry_logprobs) in enumerate(sample.teacher_topk or ()):
            if entry_ids:
                ids[row, t, : len(entry_ids)] = torch.tensor(entry_ids, dtype=torch.long)
                logprobs[row, t, : len(entry_logprobs)] = torch.tensor(entry_logprobs, dtype=torch.float32)
    return ids, logprobs


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x < 0, accurate at both ends (Maechler 2012)."""
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


# the student's mass outside the teacher's top-k is taken as at least this (its log is the tail's: a student with
# all its mass on K_t in float32 would give log 0)
MIN_TAIL = 1e-6


def topk_forward_kl(student: Tensor, teacher: Tensor) -> Tensor:
    """D_t of the module docstring (B, T): KL(teacher || student) over the teacher's top-k tokens + the rest as
    one bucket, from their logprobs (B, T, K) under the student (with grad) and the teacher (-inf: no entry). 0 at
    positions without any entry."""
    valid = torch.isfinite(teacher)  # (B, T, K)
    scored = valid.any(-1)  # (B, T)
    # positions without entries get stand-in values (0) so that no NaN enters the graph; their D_t is masked to 0
    safe_student = torch.where(valid, student, torch.zeros_like(student))
    p_teacher = torch.where(valid, teacher.exp(), torch.zeros_like(teacher))
    head = (p_teacher * (torch.where(valid, teacher, torch.zeros_like(teacher)) - safe_student)).sum(-1)  # (B, T)
    teacher_tail = (1.0 - p_teacher.sum(-1)).clamp(min=0.0)
    # log sum_{j in K_t} p_S(j); an unscored position sums its stand-ins (a logsumexp over nothing but -inf would
    # give a NaN gradient)
    in_topk = torch.where(valid | ~scored[..., None], safe_student, torch.full_like(student, -math.inf))
    student_mass = torch.logsumexp(in_topk, -1)
    log_student_tail = _log1mexp(student_mass.clamp(max=math.log1p(-MIN_TAIL)))
    tail = torch.xlogy(teacher_tail, teacher_tail) - teacher_tail * log_student_tail
    return torch.where(scored, head + tail, torch.zeros_like(head))


def leave_one_out_mean(values: Tensor, mask: Tensor) -> Tensor:
    """(B, 1): for each sample (row), the mean of `values` over the real tokens of the other rows; 0 for a lone row."""
    sums, counts = (values * mask).sum(1), mask.sum(1)
    others = (sums.sum() - sums) / (counts.sum() - counts).clamp(min=1.0)
    return others[:, None]


def discounted_sum(values: Tensor, mask: Tensor, discount: float) -> Tensor:
    """out_t = sum_{s >= t} discount^(s - t) values_s over the real tokens (B, T); discount 0 returns values."""
    values = values * mask
    if discount == 0:
        return values
    out = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 1, -1, -1):
        running = values[:, t] + discount * running
        out[:, t] = running
    return out * mask


# training FLOPs per parameter per token: policy forward + backward (6), old logprobs (2); the teacher's forward
# runs on the generation instance
@ALGORITHMS.register("distill", label="On-policy distillation", train_flops_per_param=6 + 2)
class Distill(Algorithm):
    """Per-token negative reverse KL to a teacher as the advantage, plus (reward_coef) GRPO's reward advantage."""

    def advantages(self, group: list[Sample]) -> list[float]:
        if self.spec.reward_coef == 0:
            return [0.0] * len(group)
        return [self.spec.reward_coef * value for value in GRPO(self.spec).advantages(group)]

    def prepare(self, batch: LossInputs) -> LossInputs:
        teacher = batch.teacher_logprobs
        behaviour = batch.behaviour_logprobs
        if teacher is None:
            reverse_kl, scored = torch.zeros_like(behaviour), torch.zeros_like(batch.mask)
        else:
            scored = batch.mask * ~torch.isnan(teacher)  # tokens with a teacher score
            teacher = torch.where(torch.isnan(teacher), behaviour, teacher)  # no teacher score: KL 0
            reverse_kl = (behaviour - teacher).detach() * batch.mask  # (B, T)
        returns = discounted_sum(reverse_kl, batch.mask, self.spec.kl_discount)  # G_t (B, T)
        # an unscored token has no distillation term (neither its KL nor the baseline) and is no one's baseline
        advantages = -(returns - leave_one_out_mean(returns, scored)) * scored
        advantages = (advantages + batch.scores[:, None]) * batch.mask  # (B, T)
        return replace(batch, advantages=advantages, reverse_kl=reverse_kl)

    def loss(self, batch: LossInputs) -> tuple[Tensor, Metrics]:
        if batch.advantages is None:
            batch = self.prepare(batch)
        per_token, metrics = clipped_policy_loss(batch, self.spec)
        if self.spec.teacher_topk and batch.teacher_topk_logprobs is not None:
            assert batch.topk_logprobs is not None, "the top-k term needs the policy's logprobs of the teacher's top-k"
            divergence = topk_forward_kl(batch.topk_logprobs, batch.teacher_topk_logprobs) * batch.mask  # (B, T)
            per_token = per_token + self.spec.topk_coef * divergence
            metrics["topk_kl"] = float(masked_mean(divergence.detach(), batch.mask))
        loss = add_common_terms(per_token, batch, self.spec, metrics)
        metrics["loss"] = float(loss.detach())
        if batch.reverse_kl is not None:
            metrics["reverse_kl"] = float(masked_mean(batch.reverse_kl, batch.mask))
        return loss, metrics
