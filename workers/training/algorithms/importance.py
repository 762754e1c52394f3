"""Importance weights that correct for the behaviour policy (the engine that sampled) in the decoupled PPO loss.

With `old_logprobs` (the trainer's own no-grad logprobs) every token's loss is multiplied by a detached weight
w built from the ratio rho_t = pi_old(y_t) / pi_behaviour(y_t) (`algorithm.is_*`, contract/spec.py):

    is_level token:     w_t = min(rho_t, is_cap)                          one weight per token
    is_level sequence:  w_t = min(prod_s rho_s, is_cap) for every t       one weight per sample (s: its trained tokens)
    is_mask [lo, hi]:   w_t = 0 where the ratio in use (rho_t, or the sample's product) leaves [lo, hi]

Truncation (TIS) bounds the variance a rare token or sample adds; masking (MIS) drops the tokens or samples whose
behaviour is too far from the trainer to correct at all (e.g. bf16 generation rounding on a float32 trainer).
The sequence ratio is a product over the sample's trained tokens, computed in log space (a sum of log ratios).
"""

from __future__ import annotations

import torch
from torch import Tensor

from contract.spec import AlgorithmSpec

Metrics = dict[str, float]


def truncated_is_weight(old_logprobs: Tensor, behaviour_logprobs: Tensor, is_cap: float) -> Tensor:
    """w_t = min(pi_old(y_t) / pi_behaviour(y_t), is_cap), detached (truncated importance sampling)."""
    return torch.exp(old_logprobs - behaviour_logprobs).clamp(max=is_cap).detach()


def log_ratios(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, level: str) -> Tensor:
    """log rho (B, T): per token, or each sample's summed log ratio broadcast over its tokens (0 on padding)."""
    per_token = (old_logprobs - behaviour_logprobs).detach() * mask  # (B, T)
    if level == "token":
        return per_token
    assert level == "sequence", f"unknown is_level {level!r}"
    return per_token.sum(dim=1, keepdim=True) * mask  # (B, 1) -> (B, T)


def importance_weight(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor,
                      spec: AlgorithmSpec) -> tuple[Tensor, Metrics]:
    """The detached weight (B, T) of the module docstring and its metrics: is_weight (mean over real tokens) and,
    with is_mask, is_masked_fraction (share of real tokens whose weight the mask zeroed)."""
    log_rho = log_ratios(old_logprobs, behaviour_logprobs, mask, spec.is_level)  # (B, T)
    rho = torch.exp(log_rho)  # (B, T); a long sample's product may overflow to inf: the cap and the mask bound it
    weight = rho.clamp(max=spec.is_cap) * mask  # (B, T)
    real = mask.sum().clamp(min=1.0)
    metrics: Metrics = {}
    if spec.is_mask is not None:
        low, high = spec.is_mask
        kept = ((rho >= low) & (rho <= high)).float() * mask  # (B, T)
        weight = weight * kept
        metrics["is_masked_fraction"] = float(((1.0 - kept) * mask).sum() / real)
    metrics["is_weight"] = float(weight.sum() / real)
    return weight.detach(), metrics
