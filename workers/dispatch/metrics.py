"""Skew metrics of one iteration's generation, and the ranker's recall of the longest prompts.

- `recall_top(pred, true, frac)`: of the truly longest ceil(frac * n) prompts, the share the prediction also puts in
  its top ceil(frac * n) (the paper's ranker metric; 1.0 = perfect).
- `length_ratio`: p99 / p50 of response lengths.
- `tail_fraction`: share of the generation's wall time spent after 90% of samples had finished.
- `instance_finish_times`: seconds from the iteration's start to each instance's last finished sample.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def _top(values: Sequence[float], k: int) -> set[int]:
    order = sorted(range(len(values)), key=lambda i: (-float(values[i]), i))
    return set(order[:k])


def recall_top(pred: Sequence[float], true: Sequence[float], frac: float) -> float:
    if len(pred) != len(true):
        raise ValueError(f"pred has {len(pred)} entries but true has {len(true)}")
    if not 0 < frac <= 1:
        raise ValueError(f"frac must be in (0, 1], got {frac}")
    if not true:
        return 1.0
    k = max(1, math.ceil(frac * len(true)))
    return len(_top(pred, k) & _top(true, k)) / k


def length_ratio(lengths: Sequence[float]) -> float:
    if not lengths:
        return 1.0
    p99, p50 = np.percentile(np.asarray(lengths, dtype=float), [99, 50])
    return float(p99 / max(p50, 1.0))


def tail_fraction(start: float, finished_at: Sequence[float], done_frac: float = 0.9) -> float:
    if not finished_at:
        return 0.0
    times = sorted(finished_at)
    end = times[-1]
    # async windows may start after some samples finished (clamped to the previous iteration's end): the tail
    # can't begin before the window does, so the fraction stays in [0, 1]
    t_done = max(start, times[max(0, math.ceil(done_frac * len(times)) - 1)])
    return (end - t_done) / (end - start) if end > start else 0.0


def instance_finish_times(start: float, finished_at: Sequence[float], instances: Sequence[str]) -> dict[str, float]:
    if len(finished_at) != len(instances):
        raise ValueError("finished_at and instances must have the same length")
    result: dict[str, float] = {}
    for t, inst in zip(finished_at, instances, strict=True):
        result[inst] = max(result.get(inst, 0.0), t - start)
    return dict(sorted(result.items()))


@dataclass(frozen=True)
class SkewMetrics:
    length_p50: float
    length_p99: float
    length_ratio: float
    tail_fraction: float
    makespan_s: float
    instance_finish_s: dict[str, float]
    recall_top20: float | None = None
    recall_top10: float | None = None
    recall_top5: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def skew_metrics(
    start: float,
    lengths: Sequence[float],
    finished_at: Sequence[float],
    instances: Sequence[str],
    predicted: Sequence[float] | None = None,
) -> SkewMetrics:
    """All per-iteration skew metrics from per-sample (length, finish time, instance[, predicted length])."""
    p99, p50 = (float(v) for v in np.percentile(np.asarray(lengths or [0.0], dtype=float), [99, 50]))
    recalls = {f: recall_top(predicted, lengths, f) for f in (0.2, 0.1, 0.05)} if predicted is not None else {}
    return SkewMetrics(
        length_p50=p50,
        length_p99=p99,
        length_ratio=length_ratio(lengths),
        tail_fraction=tail_fraction(start, finished_at),
        makespan_s=(max(finished_at) - start) if finished_at else 0.0,
        instance_finish_s=instance_finish_times(start, finished_at, instances),
        recall_top20=recalls.get(0.2),
        recall_top10=recalls.get(0.1),
        recall_top5=recalls.get(0.05),
    )
