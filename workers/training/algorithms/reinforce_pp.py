"""REINFORCE++ (Hu 2025): REINFORCE with PPO's tricks and a global (batch) advantage normalisation, no critic.

Token rewards of a response of length T with sequence reward r (KL in the reward, k1 estimator, detached):

    rho_t = -beta * (log pi_old(y_t) - log pi_ref(y_t)) + [t == T - 1] * r
    G_t   = sum_{s >= t} gamma^(s - t) rho_s                                   (return-to-go)
    A_t   = (G_t - mean(G)) / std(G)             over every real token of the loss batch (whitening)

then the clipped token-level surrogate of `base` (no k3 KL term in the loss: the KL is already in the reward).
pi_old is `old_logprobs` when given, else the behaviour logprobs. Whitening runs over the loss batch (one micro-step):
set `training.micro_batch_size` >= the iteration's samples for the paper's global (whole-batch) normalisation.
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
    masked_whiten,
)


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """G_t = rho_t + gamma * G_{t+1} over the trained tokens; (B, T) -> (B, T), 0 where the mask is 0. Masked tokens
    inside a row (a multi-turn episode's environment tokens) are skipped: the return flows past them unchanged, as
    if the policy's turns were one sequence."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(rewards.shape[1])):
        real = mask[:, t]
        running = torch.where(real > 0, rewards[:, t] + gamma * running, running)
        returns[:, t] = running * real
    return returns


def last_token_onehot(mask: Tensor) -> Tensor:
    """(B, T) 1.0 at each row's last trained token (mask 1), 0 elsewhere; empty rows stay 0."""
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)[None, :] * (mask > 0)  # (B, T)
    last = positions.max(dim=1).values  # (B,) 1-based, 0 for an empty row
    onehot = torch.zeros_like(mask)
    rows = torch.nonzero(last > 0).squeeze(1)
    onehot[rows, last[rows] - 1] = 1.0
    return onehot


@ALGORITHMS.register("reinforce_pp", label="REINFORCE++", train_flops_per_param=6 + 2 + 2,
                     token_budget_conflict="it whitens advantages over each micro-batch, so cutting by tokens "
                     "would change its loss")
class ReinforcePP(Algorithm):
    """REINFORCE with PPO's clipping and batch-normalised advantages, no critic."""


    def advantages(self, group: list[Sample]) -> list[float]:
        return [sample.reward for sample in group]

    def prepare(self, batch: LossInputs) -> LossInputs:
        rewards = batch.scores[:, None] * last_token_onehot(batch.mask)  # (B, T)
        if self.spec.kl_coef > 0:
            assert batch.ref_logprobs is not None, "kl_coef > 0 needs ref_logprobs"
            old = batch.old_logprobs if batch.old_logprobs is not None else batch.behaviour_logprobs
            rewards = rewards - self.spec.kl_coef * (old - batch.ref_logprobs).detach() * batch.mask
        returns = discounted_returns(rewards, batch.mask, self.spec.gamma)  # (B, T)
        return replace(batch, advantages=masked_whiten(returns, batch.mask), returns=returns)

    def loss(self, batch: LossInputs) -> tuple[Tensor, Metrics]:
        if batch.advantages is None:
            batch = self.prepare(batch)
        per_token, metrics = clipped_policy_loss(batch, self.spec)
        spec_without_kl_term = self.spec.model_copy(update={"kl_coef": 0.0})
        loss = add_common_terms(per_token, batch, spec_without_kl_term, metrics)
        metrics["loss"] = float(loss.detach())
        return loss, metrics
