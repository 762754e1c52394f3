"""The `Algorithm` contract, the tensors a loss sees (`LossInputs`) and the maths every algorithm shares.

Shapes: B = samples in the loss batch, T = longest response in it. Every per-token tensor is response-aligned:
column t is response token t of the sample (left-aligned, right-padded); `mask` (B, T) is 1.0 on real tokens.

Off-policy correction (which log-probabilities are used where):
  * `behaviour_logprobs` = log pi_behaviour(y_t): what the generation engine sampled with (carried by each `Sample`;
    may lag the trainer by up to `max_staleness` versions in async mode, and differs numerically from the trainer
    even on-policy when the engine is vLLM/bf16).
  * `old_logprobs` = log pi_old(y_t): the trainer's own no-grad recomputation at the start of the iteration, or None.
  * `logprobs` = log pi_theta(y_t): the current policy, with gradient.
  Without `old_logprobs` the PPO ratio is r_t = pi_theta / pi_behaviour (behaviour logprobs act as the old policy),
  clipped to [1 - eps, 1 + eps]; no extra weight. With `old_logprobs` the ratio is r_t = pi_theta / pi_old (clipped)
  and every token loss is multiplied by a detached importance weight against the behaviour policy: by default the
  truncated token weight w_t = min(pi_old / pi_behaviour, is_cap); `algorithm.is_level: sequence` and
  `algorithm.is_mask` give sequence-level truncated IS and masked IS (`importance.py`). Decoupled PPO, which corrects
  staleness and engine/trainer mismatch without letting one stale token dominate the step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from contract.registry import Registry
from contract.sample import Sample
from contract.spec import AlgorithmSpec
from workers.training.algorithms.importance import importance_weight

Metrics = dict[str, float]
# name -> Algorithm class; each algorithm module registers itself (`@ALGORITHMS.register(...)`, contract/registry.py)
ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")


@dataclass
class LossInputs:
    logprobs: Tensor  # (B, T) log pi_theta of the response tokens, with grad
    behaviour_logprobs: Tensor  # (B, T) log pi_behaviour, from the samples
    mask: Tensor  # (B, T) 1.0 on response tokens, 0.0 on padding
    scores: Tensor  # (B,) sequence-level advantage from `Algorithm.advantages` (PPO/REINFORCE++: the reward)
    old_logprobs: Tensor | None = None  # (B, T) trainer's own no-grad logprobs, see the module docstring
    ref_logprobs: Tensor | None = None  # (B, T) frozen reference policy; required when kl_coef > 0
    entropy: Tensor | None = None  # (B, T) policy entropy at each response position
    values: Tensor | None = None  # (B, T) value head, with grad (PPO)
    old_values: Tensor | None = None  # (B, T) value head, no grad, at the start of the iteration (PPO)
    advantages: Tensor | None = None  # (B, T) token advantages: filled by `Algorithm.prepare`
    returns: Tensor | None = None  # (B, T) value targets: filled by `Algorithm.prepare` (PPO)
    teacher_logprobs: Tensor | None = None  # (B, T) log pi_teacher of the response tokens, NaN where unscored (distill)
    reverse_kl: Tensor | None = None  # (B, T) log pi_behaviour - log pi_teacher: filled by `Distill.prepare`
    # distill with algorithm.teacher_topk = k: the teacher's top-k ids at each position (B, T, K), their logprobs under
    # the teacher (-inf where unscored or past an entry's k) and under the current policy (with grad)
    teacher_topk_ids: Tensor | None = None
    teacher_topk_logprobs: Tensor | None = None
    topk_logprobs: Tensor | None = None


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Token-level mean: sum over every real token of the batch / number of real tokens."""
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / std over the real tokens of the batch (population std); padding stays 0."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * torch.rsqrt(var + eps) * mask


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref): exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman 2020)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def clipped_policy_loss(batch: LossInputs, spec: AlgorithmSpec) -> tuple[Tensor, Metrics]:
    """Per-token clipped surrogate -min(r A, clip(r, 1-eps, 1+eps) A) (B, T), times w_t when `old_logprobs` is given.

    `batch.advantages` must be token-level (after `prepare`). Returns the per-token loss (unreduced) and metrics.
    """
    assert batch.advantages is not None, "call Algorithm.prepare before the loss"
    old = batch.old_logprobs if batch.old_logprobs is not None else batch.behaviour_logprobs
    ratio = torch.exp(batch.logprobs - old)  # (B, T)
    clip_eps = spec.clip_eps
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    per_token = -torch.min(ratio * batch.advantages, clipped * batch.advantages)  # (B, T)
    metrics: Metrics = {}
    if batch.old_logprobs is not None:
        is_weight, is_metrics = importance_weight(batch.old_logprobs, batch.behaviour_logprobs, batch.mask, spec)
        per_token = per_token * is_weight  # (B, T)
        metrics.update(is_metrics)
    low = (ratio < 1.0 - clip_eps) & (batch.advantages < 0)
    high = (ratio > 1.0 + clip_eps) & (batch.advantages > 0)
    is_clipped = low | high
    metrics["clip_frac"] = float(masked_mean(is_clipped.float(), batch.mask))
    metrics["ratio"] = float(masked_mean(ratio.detach(), batch.mask))
    return per_token, metrics


def add_common_terms(per_token: Tensor, batch: LossInputs, spec: AlgorithmSpec, metrics: Metrics) -> Tensor:
    """Add beta * k3 KL (when kl_coef > 0) and -entropy_coef * entropy to a per-token loss; reduce token-level."""
    if spec.kl_coef > 0:
        assert batch.ref_logprobs is not None, "kl_coef > 0 needs ref_logprobs"
        kl = k3_kl(batch.logprobs, batch.ref_logprobs)  # (B, T)
        per_token = per_token + spec.kl_coef * kl
        metrics["kl"] = float(masked_mean(kl.detach(), batch.mask))
    elif batch.ref_logprobs is not None:
        metrics["kl"] = float(masked_mean(k3_kl(batch.logprobs.detach(), batch.ref_logprobs), batch.mask))
    if batch.entropy is not None:
        if spec.entropy_coef > 0:
            per_token = per_token - spec.entropy_coef * batch.entropy
        metrics["entropy"] = float(masked_mean(batch.entropy.detach(), batch.mask))
    return masked_mean(per_token, batch.mask)


def group_by_id(samples: list[Sample]) -> dict[str, list[int]]:
    """Indices of `samples` per group_id, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for index, sample in enumerate(samples):
        groups.setdefault(sample.group_id, []).append(index)
    return groups


class Algorithm(ABC):
    """An RL objective: sequence advantages from a group of scored samples, then a pure loss over tensors."""

    uses_value_head: bool = False

    def __init__(self, spec: AlgorithmSpec) -> None:
        self.spec = spec

    @property
    def needs_reference(self) -> bool:
        return self.spec.kl_coef > 0

    @abstractmethod
    def advantages(self, group: list[Sample]) -> list[float]:
        """One scalar per sample of one prompt's group (same order), from `Sample.reward`."""

    def batch_advantages(self, samples: list[Sample]) -> list[float]:
        """`advantages` applied to every group (by group_id) of a batch of complete groups, in batch order."""
        out = [0.0] * len(samples)
        for indices in group_by_id(samples).values():
            for index, value in zip(indices, self.advantages([samples[i] for i in indices]), strict=True):
                out[index] = value
        return out

    def prepare(self, batch: LossInputs) -> LossInputs:
        """Fill token-level `advantages` (and `returns`) from detached inputs. Default: broadcast the score."""
        return replace(batch, advantages=batch.scores[:, None] * batch.mask)  # (B, T)

    def loss(self, batch: LossInputs) -> tuple[Tensor, Metrics]:
        """Token-level mean loss over the batch's real tokens, and float metrics (clip_frac, kl, entropy, ...)."""
        if batch.advantages is None:
            batch = self.prepare(batch)
        per_token, metrics = clipped_policy_loss(batch, self.spec)
        loss = add_common_terms(per_token, batch, self.spec, metrics)
        metrics["loss"] = float(loss.detach())
        return loss, metrics
