"""Tinker's built-in losses over per-token logprobs (docs/tinker.md), summed over tokens as Tinker defines them.

    logprobs = target_logprobs(model, data)          # per datum: log p(target_tokens[i] | tokens[: i + 1])
    loss = datum_loss("ppo", logprobs[k], data[k]["inputs"], config)

- `cross_entropy`: -sum(weights * logprobs) (weights default 1)
- `importance_sampling`: -sum(exp(logprobs - sampling logprobs) * advantages)
- `ppo`: -sum(min(r * A, clip(r, clip_low_threshold, clip_high_threshold) * A)), r the same ratio (0.8 / 1.2)
- `cispo`: -sum(sg(clip(r, low, high)) * logprobs * A): the clipped ratio weights the policy gradient, no token dropped
- `dro`: -sum(logprobs * A - beta / 2 * (logprobs - sampling logprobs)^2), `beta` default 0.05
- `gspo` (GSPO-token): every token's ratio has the value of the sequence ratio s = exp(mean over the tokens that
  `sequence_ratio_mask` marks (default all) of (logprobs - sampling logprobs)) and its own logprob's gradient;
  then PPO's clipped objective on it
"""

from __future__ import annotations

from typing import Any

import torch


def target_logprobs(model: Any, data: list[dict[str, Any]], pad_id: int = 0) -> list[torch.Tensor]:
    """One padded forward pass; per datum the logprob of each target token (with gradients)."""
    device = next(model.parameters()).device
    longest = max(len(datum["tokens"]) for datum in data)
    ids = torch.full((len(data), longest), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(data), longest), dtype=torch.long, device=device)
    targets = torch.zeros((len(data), longest), dtype=torch.long, device=device)
    for row, datum in enumerate(data):
        n = len(datum["tokens"])
        ids[row, :n] = torch.tensor(datum["tokens"], dtype=torch.long)
        targets[row, :n] = torch.tensor([int(t) for t in datum["inputs"]["target_tokens"]], dtype=torch.long)
        mask[row, :n] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return [logprobs[row, :len(datum["tokens"])] for row, datum in enumerate(data)]


def _input(inputs: dict[str, Any], name: str, like: torch.Tensor, default: float | None = None) -> torch.Tensor:
    if name not in inputs:
        if default is None:
            raise ValueError(f"loss_fn_inputs.{name} is required")
        return torch.full_like(like, default)
    return torch.tensor([float(v) for v in inputs[name]], dtype=like.dtype, device=like.device)


def datum_loss(loss_fn: str, logprobs: torch.Tensor, inputs: dict[str, Any], config: dict[str, Any]) -> torch.Tensor:
    if loss_fn == "cross_entropy":
        return -(logprobs * _input(inputs, "weights", logprobs, 1.0)).sum()
    ratio = torch.exp(logprobs - _input(inputs, "logprobs", logprobs))
    advantages = _input(inputs, "advantages", logprobs)
    if loss_fn == "importance_sampling":
        return -(ratio * advantages).sum()
    low = float(config.get("clip_low_threshold", 0.8))
    high = float(config.get("clip_high_threshold", 1.2))
    if loss_fn == "ppo":
        clipped = torch.clamp(ratio, low, high)
        return -torch.minimum(ratio * advantages, clipped * advantages).sum()
    if loss_fn == "cispo":
        return -(torch.clamp(ratio, low, high).detach() * logprobs * advantages).sum()
    if loss_fn == "dro":
        beta = float(config.get("beta", 0.05))
        penalty = (logprobs - _input(inputs, "logprobs", logprobs)) ** 2
        return -(logprobs * advantages - 0.5 * beta * penalty).sum()
    if loss_fn == "gspo":
        in_ratio = _input(inputs, "sequence_ratio_mask", logprobs, 1.0) != 0
        if not bool(in_ratio.any()):
            raise ValueError("loss_fn_inputs.sequence_ratio_mask marks no token: gspo needs at least one")
        log_ratio = (logprobs.detach() - _input(inputs, "logprobs", logprobs))[in_ratio].mean()
        token_ratio = torch.exp(log_ratio + logprobs - logprobs.detach())
        clipped = torch.clamp(token_ratio, low, high)
        return -torch.minimum(token_ratio * advantages, clipped * advantages).sum()
    raise ValueError(f"unknown loss_fn {loss_fn!r}")
