"""Per-iteration metrics (keys of docs/api.md) computed from the samples an iteration trained on. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from contract.sample import Sample


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


def generation_window(samples: Sequence[Sample], fallback_start: float,
                      previous_end: float | None = None) -> tuple[float, float]:
    """(start, end) of the generation that produced `samples`, from the engines' own timestamps: end = the last
    `finished_at`, start = the first `started_at` (else `fallback_start`, the dispatch time), but never before
    `previous_end` (async: the previous iteration's generation end; requests admitted earlier shared the engine
    with it). Independent of when the driver polled, so training time never leaks into T_gen."""
    finished = [s.finished_at for s in samples if s.finished_at > 0]
    if not finished:
        return fallback_start, fallback_start
    started = [s.started_at for s in samples if s.started_at > 0]
    start = min(started) if started else fallback_start
    if previous_end is not None:
        start = max(start, previous_end)
    return start, max(start, max(finished))


def producing_instances(samples: Sequence[Sample]) -> int:
    """How many distinct generation instances produced `samples` (not how many are alive now)."""
    return len({s.instance_id for s in samples if s.instance_id})


def trainer_metrics(step: dict[str, float]) -> dict[str, float]:
    """The optimizer step's metrics under the API's names (loss, kl, entropy, clip_frac) plus grad_norm."""
    keep = ("loss", "kl", "entropy", "clip_frac", "grad_norm", "lr", "is_weight", "policy_loss", "value_loss")
    return {name: float(step[name]) for name in keep if name in step}


def finite(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: NaN/inf become None."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
