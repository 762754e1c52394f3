"""RLOO (Ahmadian et al. 2024, "Back to Basics"): REINFORCE with a leave-one-out baseline.

For a group of G responses with rewards r_1..r_G the baseline of sample i is the mean of the other G - 1 rewards:

    A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j  =  G / (G - 1) * (r_i - mean(r))        (G == 1 -> A_i = 0)

A_i is broadcast to every token and trained with the same clipped, token-level surrogate (+ optional k3 KL and
entropy terms) as GRPO; with one update per batch the clip is inactive and this is plain RLOO's policy gradient.
"""

from __future__ import annotations

from contract.sample import Sample
from workers.training.algorithms.base import ALGORITHMS, Algorithm


@ALGORITHMS.register("rloo", label="RLOO", train_flops_per_param=6 + 2 + 2)  # as GRPO
class RLOO(Algorithm):
    """REINFORCE with a leave-one-out baseline within each group."""


    def advantages(self, group: list[Sample]) -> list[float]:
        rewards = [sample.reward for sample in group]
        size = len(rewards)
        if size < 2:
            return [0.0] * size
        total = sum(rewards)
        return [reward - (total - reward) / (size - 1) for reward in rewards]
