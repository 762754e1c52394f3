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
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from contract.sample import Sample
from workers.training.algorithms.base import ALGORITHMS, Algorithm, LossInputs, Metrics, masked_mean
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
        loss, metrics = super().loss(batch)
        if batch.reverse_kl is not None:
            metrics["reverse_kl"] = float(masked_mean(batch.reverse_kl, batch.mask))
        return loss, metrics
