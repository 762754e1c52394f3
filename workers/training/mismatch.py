"""Training-inference mismatch: how far the trainer's logprobs are from the behaviour logprobs the engine recorded,
for the same tokens at the same policy version.

Only on-policy tokens count: trained tokens (loss mask 1) sampled by the version the trainer holds before the step
(`Trainer.version`); a stale token's gap mixes mismatch with the policy's own change. With
delta_t = log pi_trainer(y_t) - log pi_behaviour(y_t) and rho_t = exp(delta_t), per iteration:

    mismatch_kl           = mean_t (rho_t - 1 - delta_t)        k3 estimator of KL(pi_behaviour || pi_trainer) >= 0
                                                                 (the tokens were sampled from pi_behaviour)
    mismatch_abs_mean     = mean_t |delta_t|,  mismatch_abs_max = max_t |delta_t|
    mismatch_out_fraction = share of tokens with rho_t outside [1/c, c]   (c: algorithm.mismatch_ratio)
    mismatch_tokens       = how many tokens these figures cover (0: no figure; the other keys are then absent)

Micro-steps add their `MismatchSums`; the optimizer step turns the iteration's sums into the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from contract import version_marks
from contract.sample import Sample


@dataclass
class MismatchSums:
    tokens: float = 0.0
    kl: float = 0.0
    abs_delta: float = 0.0
    abs_max: float = 0.0
    outside: float = 0.0

    def add(self, other: MismatchSums) -> MismatchSums:
        return MismatchSums(self.tokens + other.tokens, self.kl + other.kl, self.abs_delta + other.abs_delta,
                            max(self.abs_max, other.abs_max), self.outside + other.outside)

    def metrics(self) -> dict[str, float]:
        if self.tokens <= 0:
            return {"mismatch_tokens": 0.0}
        return {"mismatch_kl": self.kl / self.tokens, "mismatch_abs_mean": self.abs_delta / self.tokens,
                "mismatch_abs_max": self.abs_max, "mismatch_out_fraction": self.outside / self.tokens,
                "mismatch_tokens": self.tokens}


def token_deltas(trainer_logprobs: Tensor, behaviour_logprobs: Tensor) -> Tensor:
    """delta (B, T) = log pi_trainer - log pi_behaviour, detached."""
    return (trainer_logprobs.detach() - behaviour_logprobs).float()


def mismatch_sums(trainer_logprobs: Tensor, behaviour_logprobs: Tensor, on_policy: Tensor,
                  ratio_bound: float) -> MismatchSums:
    """The sums over the tokens where `on_policy` (B, T) is 1."""
    assert ratio_bound > 1.0, "c must exceed 1"
    delta = token_deltas(trainer_logprobs, behaviour_logprobs)  # (B, T)
    selected = on_policy > 0
    if not bool(selected.any()):
        return MismatchSums()
    picked = delta[selected].double()  # (N,); float64 and expm1: k3 of a tiny delta stays >= 0, not rounding noise
    k3 = torch.expm1(picked) - picked  # (N,) >= 0
    bound = math.log(ratio_bound)
    return MismatchSums(tokens=float(picked.numel()), kl=float(k3.sum()), abs_delta=float(picked.abs().sum()),
                        abs_max=float(picked.abs().max()), outside=float((picked.abs() > bound).sum()))


def on_policy_mask(samples: Sequence[Sample], version: int, mask: Tensor) -> Tensor:
    """(B, T) 1.0 on the trained tokens (`mask`, response-aligned as `batch.collate`) sampled by `version`."""
    out = torch.zeros_like(mask)
    for row, sample in enumerate(samples):
        versions = version_marks.token_versions(sample.version_marks, len(sample.response_ids),
                                                sample.policy_version)
        out[row, : len(versions)] = torch.tensor([1.0 if v == version else 0.0 for v in versions])
    return out * (mask > 0).float()


def sample_mismatch(delta: Tensor, on_policy: Tensor) -> list[float | None]:
    """Each row's mean k3 over its on-policy tokens (None for a row without one): the sample browser's filter."""
    delta = delta.double()
    k3 = (torch.expm1(delta) - delta) * on_policy  # (B, T)
    counts = on_policy.sum(dim=1)  # (B,)
    return [float(k3[row].sum() / counts[row]) if counts[row] > 0 else None for row in range(delta.shape[0])]
