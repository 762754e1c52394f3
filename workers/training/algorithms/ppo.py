"""PPO (Schulman et al. 2017) for LLMs with a value head on the policy model and GAE (Schulman et al. 2016).

The value head maps the last hidden state before response token t to V_t (one critic shared with the policy trunk).
Token rewards: the sequence reward r on the last token (rho_t = [t == T - 1] * r). With V_T = 0 after the end:

    delta_t = rho_t + gamma * V_{t+1} - V_t
    A_t     = sum_{l >= 0} (gamma * lambda)^l delta_{t+l}       (GAE; computed from the no-grad `old_values`)
    R_t     = A_t + V_t                                           (value targets)

The policy term is the clipped token-level surrogate of `base` on A_t (not normalised: rewards are in [0, 1] scale
here; whiten upstream if yours are not). The value loss is clipped around the old values:

    V^clip_t = V_old_t + clip(V_t - V_old_t, -eps, eps)
    L_V      = 0.5 * mean_t max((V_t - R_t)^2, (V^clip_t - R_t)^2)

    L = L_policy + vf_coef * L_V (+ beta * k3 KL - entropy_coef * H, token-level means)
"""

from __future__ import annotations

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
from workers.training.algorithms.reinforce_pp import last_token_onehot


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the trained tokens of left-aligned rows. (B, T) x3 -> advantages (B, T),
    returns (B, T). Masked tokens inside a row (a multi-turn episode's environment tokens) are skipped: the
    recursion steps from one policy token to the next, as if the policy's turns were one sequence."""
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])  # (B,) V_{t+1}; 0 past the last real token
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(rewards.shape[1])):
        real = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = torch.where(real, delta + gamma * lam * running, running)
        advantages[:, t] = running * mask[:, t]
        next_value = torch.where(real, values[:, t], next_value)
    return advantages, (advantages + values) * mask


# policy and critic forward + backward (6 + 6), old logprobs, old values, reference, reward (2 each)
@ALGORITHMS.register("ppo", label="PPO", train_flops_per_param=6 + 6 + 2 + 2 + 2 + 2)
class PPO(Algorithm):
    """Clipped surrogate with a value head and GAE advantages."""

    uses_value_head = True

    def advantages(self, group: list[Sample]) -> list[float]:
        return [sample.reward for sample in group]

    def prepare(self, batch: LossInputs) -> LossInputs:
        assert batch.old_values is not None, "PPO needs old_values from the value head"
        rewards = batch.scores[:, None] * last_token_onehot(batch.mask)  # (B, T)
        advantages, returns = gae(rewards, batch.old_values.detach(), batch.mask, self.spec.gamma, self.spec.lam)
        return replace(batch, advantages=advantages, returns=returns)

    def loss(self, batch: LossInputs) -> tuple[Tensor, Metrics]:
        if batch.advantages is None:
            batch = self.prepare(batch)
        assert batch.values is not None and batch.old_values is not None and batch.returns is not None
        per_token, metrics = clipped_policy_loss(batch, self.spec)
        policy_loss = add_common_terms(per_token, batch, self.spec, metrics)
        value_loss = clipped_value_loss(batch.values, batch.old_values, batch.returns, batch.mask, self.spec.clip_eps)
        loss = policy_loss + self.spec.vf_coef * value_loss
        metrics.update(loss=float(loss.detach()), policy_loss=float(policy_loss.detach()),
                       value_loss=float(value_loss.detach()))
        return loss, metrics


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_eps: float) -> Tensor:
    """0.5 * token-mean of max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2); all (B, T)."""
    clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    return 0.5 * masked_mean(torch.max((values - returns) ** 2, (clipped - returns) ** 2), mask)
