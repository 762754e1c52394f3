"""How one iteration's prompts are split over generation instances (paper Algorithm 2).

Pure Python (no torch): the planner/simulator in the control plane imports it.

`skew_aware_split` sorts prompts by predicted output length, treats the top `alpha` as the long tail, and enumerates
how many instances (N_long) serve the tail exclusively. An instance holding M prompts runs at batch size
BS = min(max_batch_size, M) and is estimated to take PTL(BS) * L * ceil(M / BS), with L the group's length estimate
(P90 of recent lengths for the tail, P50 for the rest). N_long = 0 (every instance mixed) is a candidate too: an
instance holding t tail prompts among its M has L_avg = (t * L_long + (M - t) * L_regular) / M and cannot finish
before its longest prompt, so it takes PTL(BS) * max(L_long, L_avg * ceil(M / BS)) (the same formula when t = 0 or M).
The split with the lowest estimated makespan wins; a split with more long-tail instances must beat the best one with
fewer by MIN_GAIN (the estimate is coarse, so near-ties go to fewer long-tail instances).

Invariants of every `SplitPlan`: one assignment per instance (possibly empty), and every prompt index appears exactly
once over all assignments. Inside an instance prompts are ordered longest-predicted-first (LPT) for `skew_aware`,
in ascending index order (FIFO) for `random` and `round_robin`.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MIN_GAIN = 0.02  # one more long-tail instance must cut the estimated makespan by 2%: the PTL model is coarse


@dataclass(frozen=True)
class PTLProfile:
    """Per-token latency PTL(BS): seconds of one decode step (one token for each of BS running sequences).

    `points` are (batch_size, seconds_per_token) pairs; evaluation interpolates linearly between them, clamps below
    the smallest batch size and extrapolates linearly (never below the last value) above the largest.
    """

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("PTLProfile needs at least one (batch_size, seconds_per_token) point")
        ordered = tuple(sorted((int(bs), float(s)) for bs, s in self.points))
        sizes = [bs for bs, _ in ordered]
        if sizes[0] < 1 or len(set(sizes)) != len(sizes):
            raise ValueError(f"PTLProfile batch sizes must be distinct and >= 1, got {sizes}")
        if any(not (s > 0 and math.isfinite(s)) for _, s in ordered):
            raise ValueError(f"PTLProfile seconds per token must be positive and finite, got {ordered}")
        object.__setattr__(self, "points", ordered)

    def __call__(self, batch_size: int) -> float:
        sizes = [bs for bs, _ in self.points]
        values = [s for _, s in self.points]
        if batch_size <= sizes[0] or len(sizes) == 1:
            return values[0] if batch_size <= sizes[0] else values[-1]
        if batch_size >= sizes[-1]:
            slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
            return max(values[-1], values[-1] + slope * (batch_size - sizes[-1]))
        hi = bisect.bisect_left(sizes, batch_size)
        lo = hi - 1
        frac = (batch_size - sizes[lo]) / (sizes[hi] - sizes[lo])
        return values[lo] + frac * (values[hi] - values[lo])


def ptl_from_timings(timings: Mapping[int, float]) -> PTLProfile:
    return PTLProfile(tuple(sorted((int(bs), float(s)) for bs, s in timings.items())))


def ptl_to_json(profile: PTLProfile) -> list[list[float]]:
    return [[bs, s] for bs, s in profile.points]


def ptl_from_json(data: Sequence[Sequence[float]]) -> PTLProfile:
    return PTLProfile(tuple((int(bs), float(s)) for bs, s in data))


def refresh_ptl(profile: PTLProfile, batch_size: int, seconds_per_token: float, weight: float = 0.2) -> PTLProfile:
    """Blend a live timing at `batch_size` into the profile (exponential moving average; new point if absent)."""
    points = dict(profile.points)
    old = points.get(batch_size)
    points[batch_size] = seconds_per_token if old is None else (1 - weight) * old + weight * seconds_per_token
    return ptl_from_timings(points)


@dataclass(frozen=True)
class InstanceAssignment:
    instance: int
    prompt_indices: list[int]  # the order the instance should admit them in
    batch_size: int  # min(max_batch_size, len(prompt_indices))
    long_tail: bool  # dedicated to the long tail
    est_latency: float  # seconds; 0.0 when the policy makes no estimate


@dataclass(frozen=True)
class SplitPlan:
    assignments: list[InstanceAssignment]
    n_long_instances: int
    est_makespan: float  # max est_latency; 0.0 when the policy makes no estimate

    def instance_of(self) -> dict[int, int]:
        """prompt index -> instance."""
        return {p: a.instance for a in self.assignments for p in a.prompt_indices}


def _check_common(n_prompts: int, n_instances: int, max_batch_size: int) -> None:
    if n_prompts < 0:
        raise ValueError(f"n_prompts must be >= 0, got {n_prompts}")
    if n_instances < 1:
        raise ValueError(f"n_instances must be >= 1, got {n_instances}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")


def _instance_latency(ptl: PTLProfile, m: int, t: int, max_batch_size: int, l_long: float, l_reg: float) -> float:
    """Algorithm-2 latency of one instance with m prompts, t of them long-tail."""
    if m == 0:
        return 0.0
    bs = min(max_batch_size, m)
    l_avg = (t * l_long + (m - t) * l_reg) / m
    return ptl(bs) * max(l_long if t else l_reg, l_avg * math.ceil(m / bs))


def _spread(order: Sequence[int], weights: Sequence[float], n_bins: int) -> list[list[int]]:
    """Spread `order` (longest first) over n_bins: equal counts (+-1), greedy least-predicted-load within that."""
    base, extra = divmod(len(order), n_bins)  # `extra` bins get base + 1 items, the others base
    bins: list[list[int]] = [[] for _ in range(n_bins)]
    heap = [(0.0, 0, b) for b in range(n_bins)]  # (load, count, bin); a bin once closed stays closed
    n_big = 0
    for idx in order:
        while True:
            load, count, b = heapq.heappop(heap)
            if count < base or (count == base and n_big < extra):
                break
        bins[b].append(idx)
        n_big += count == base
        heapq.heappush(heap, (load + max(weights[idx], 0.0), count + 1, b))
    return bins


def skew_aware_split(
    predicted: Sequence[float],
    n_instances: int,
    ptl: PTLProfile,
    *,
    recent_lengths: Sequence[float],
    alpha: float = 0.2,
    max_batch_size: int,
) -> SplitPlan:
    """Paper Algorithm 2: dedicate the fewest instances to the top-`alpha` predicted prompts that minimises makespan."""
    n = len(predicted)
    _check_common(n, n_instances, max_batch_size)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if any(not math.isfinite(float(p)) for p in predicted):
        raise ValueError("predicted lengths must be finite numbers")
    pred = [float(p) for p in predicted]
    order = sorted(range(n), key=lambda i: (-pred[i], i))  # longest predicted first
    source = [float(x) for x in recent_lengths] if len(recent_lengths) else pred
    if source:
        l_long, l_reg = (float(v) for v in np.percentile(np.asarray(source, dtype=float), [90, 50]))
    else:
        l_long = l_reg = 0.0
    n_tail = min(n - 1, math.ceil(alpha * n)) if n >= 2 else 0
    has_tail = n_tail >= 1 and l_long > l_reg * (1 + 1e-9)  # equal lengths: no tail to isolate
    tail_worth_it = has_tail and n_instances >= 2

    if not has_tail:
        n_tail, l_long = 0, l_reg
    # candidate N_long = 0: every instance mixed, holding its share of the tail
    m_mixed, t_mixed = math.ceil(n / n_instances), math.ceil(n_tail / n_instances)
    best_n_long = 0
    best_makespan = _instance_latency(ptl, m_mixed, t_mixed, max_batch_size, l_long, l_reg)
    if tail_worth_it:
        for n_long in range(1, n_instances):
            m_long = math.ceil(n_tail / n_long)
            m_reg = math.ceil((n - n_tail) / (n_instances - n_long))
            makespan = max(
                _instance_latency(ptl, m_long, m_long, max_batch_size, l_long, l_reg),
                _instance_latency(ptl, m_reg, 0, max_batch_size, l_long, l_reg),
            )
            if makespan < best_makespan * (1 - MIN_GAIN):
                best_n_long, best_makespan = n_long, makespan

    if best_n_long == 0:
        groups = [(list(range(n_instances)), order, False)]
    else:
        groups = [
            (list(range(best_n_long)), order[:n_tail], True),
            (list(range(best_n_long, n_instances)), order[n_tail:], False),
        ]
    tail = set(order[:n_tail])
    assignments: list[InstanceAssignment] = []
    for instances, members, is_long in groups:
        for inst, bin_ in zip(instances, _spread(members, pred, len(instances)), strict=True):
            bin_.sort(key=lambda i: (-pred[i], i))  # LPT inside the instance
            m, t = len(bin_), sum(i in tail for i in bin_)
            assignments.append(
                InstanceAssignment(
                    instance=inst,
                    prompt_indices=bin_,
                    batch_size=min(max_batch_size, m),
                    long_tail=is_long,
                    est_latency=_instance_latency(ptl, m, t, max_batch_size, l_long, l_reg),
                )
            )
    return SplitPlan(
        assignments=assignments,
        n_long_instances=best_n_long,
        est_makespan=max(a.est_latency for a in assignments),
    )


def _plan_from_bins(bins: list[list[int]], max_batch_size: int) -> SplitPlan:
    return SplitPlan(
        assignments=[
            InstanceAssignment(
                instance=i,
                prompt_indices=sorted(b),  # FIFO: dataset order
                batch_size=min(max_batch_size, len(b)),
                long_tail=False,
                est_latency=0.0,
            )
            for i, b in enumerate(bins)
        ],
        n_long_instances=0,
        est_makespan=0.0,
    )


def random_split(n_prompts: int, n_instances: int, *, seed: int, max_batch_size: int) -> SplitPlan:
    """Shuffle prompts and deal equal shares (+-1) to instances; FIFO inside each."""
    _check_common(n_prompts, n_instances, max_batch_size)
    shuffled = list(range(n_prompts))
    random.Random(seed).shuffle(shuffled)
    return _plan_from_bins([shuffled[i::n_instances] for i in range(n_instances)], max_batch_size)


def round_robin_split(n_prompts: int, n_instances: int, *, max_batch_size: int) -> SplitPlan:
    """Prompt i goes to instance i mod N; FIFO inside each."""
    _check_common(n_prompts, n_instances, max_batch_size)
    return _plan_from_bins([list(range(i, n_prompts, n_instances)) for i in range(n_instances)], max_batch_size)
