"""GRPO (Shao et al. 2024, DeepSeekMath): critic-free PPO with group-normalised advantages.

For a prompt q with G sampled responses o_1..o_G and rewards r_1..r_G:

    A_i = (r_i - mean(r)) / (std(r) + 1e-4)        (std: unbiased, as TRL; G == 1 or equal rewards -> A_i = 0)

and every token t of o_i gets A_i. With r_{i,t} = pi_theta(o_{i,t}) / pi_old(o_{i,t}) (see `base` for which
log-probabilities stand for pi_old) the per-token loss is

    l_{i,t} = -min(r_{i,t} A_i, clip(r_{i,t}, 1 - eps, 1 + eps) A_i) + beta * KL3_{i,t} - entropy_coef * H_{i,t}
    KL3_{i,t} = pi_ref / pi_theta - log(pi_ref / pi_theta) - 1                       (k3, unbiased and >= 0)

aggregated token-level: L = sum_{i,t} l_{i,t} / sum_i |o_i| (every token weighs the same, as DAPO / TRL "bnpo").
"""

from __future__ import annotations

import statistics

from contract.sample import Sample
from workers.training.algorithms.base import ALGORITHMS, Algorithm

STD_EPS = 1e-4


# training FLOPs per parameter per token: policy forward + backward (6), old logprobs (2), reference (2)
@ALGORITHMS.register("grpo", label="GRPO", train_flops_per_param=6 + 2 + 2)
class GRPO(Algorithm):
    """PPO's clipped surrogate with group-normalised advantages, no critic."""


    def advantages(self, group: list[Sample]) -> list[float]:
        rewards = [sample.reward for sample in group]
        if len(rewards) < 2:
            return [0.0] * len(rewards)
        mean = statistics.fmean(rewards)
        std = statistics.stdev(rewards)
        return [(reward - mean) / (std + STD_EPS) for reward in rewards]
