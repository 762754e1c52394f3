"""Per-iteration metrics (keys of docs/api.md) computed from the samples an iteration trained on. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from workers.sample import Sample


def length_metrics(lengths: Sequence[int]) -> dict[str, float]:
    if not lengths:
        return {}
    arr = np.asarray(lengths, dtype=float)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, [50, 90, 99]))
    return {"len_p50": p50, "len_p90": p90, "len_p99": p99, "len_max": float(arr.max()),
            "skew_p99_p50": p99 / max(p50, 1.0)}


def sample_metrics(samples: Sequence[Sample], train_version: int) -> dict[str, float]:
    """Reward, lengths and staleness of the samples of one iteration trained at weights `train_version`."""
    if not samples:
        return {}
    rewards = np.asarray([s.reward for s in samples], dtype=float)
    staleness = [train_version - s.policy_version for s in samples]
    out: dict[str, float] = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "staleness_mean": float(np.mean(staleness)),
        "reward_errors": float(sum(1 for s in samples if s.reward_error)),
    }
    out.update(length_metrics([len(s.response_ids) for s in samples]))
    return out


def rates(samples: Sequence[Sample], iteration_seconds: float) -> dict[str, float]:
    tokens = sum(len(s.response_ids) for s in samples)
    seconds = max(iteration_seconds, 1e-9)
    return {"samples_per_s": len(samples) / seconds, "tokens_per_s": tokens / seconds}


def trainer_metrics(step: dict[str, float]) -> dict[str, float]:
    """The optimizer step's metrics under the API's names (loss, kl, entropy, clip_frac) plus grad_norm."""
    keep = ("loss", "kl", "entropy", "clip_frac", "grad_norm", "is_weight", "policy_loss", "value_loss")
    return {name: float(step[name]) for name in keep if name in step}


def finite(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: NaN/inf become None."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
