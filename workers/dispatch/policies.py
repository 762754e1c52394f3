"""Dispatch policies: which generation instance gets which prompt, in what order (DESIGN §2.3).

    policy = setup_dispatch("skew_aware", n_instances=4, max_batch_size=32, ptl=profile, ranker=ranker)
    per_instance = policy.assign(rows)       # list (one per instance) of rows, in admission order
    ... after generation: policy.observe(rows, lengths); policy.end_iteration()   # refit the ranker

`random` (shuffle, equal shares, FIFO), `round_robin` (i mod N, FIFO) and `skew_aware` (paper Algorithm 2 on the
ranker's predictions, longest-predicted-first inside an instance; the engine's continuous batching backfills).
Rows are dataset rows: dicts with `prompt` and `prompt_id`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from workers.dispatch.ranker import FeatureRidgeRanker, LengthRanker
from workers.dispatch.split import PTLProfile, SplitPlan, random_split, round_robin_split, skew_aware_split

POLICIES = ("random", "round_robin", "skew_aware")
Row = Mapping[str, Any]


class DispatchPolicy(ABC):
    name: str

    def __init__(self, *, n_instances: int, max_batch_size: int):
        if n_instances < 1 or max_batch_size < 1:
            raise ValueError(f"need n_instances >= 1 and max_batch_size >= 1 (got {n_instances}, {max_batch_size})")
        self.n_instances, self.max_batch_size = n_instances, max_batch_size
        self.last_predicted: list[float] | None = None  # predictions behind the last split (skew_aware only)

    @abstractmethod
    def split(self, rows: Sequence[Row], *, iteration: int = 0) -> SplitPlan: ...

    def assign(self, rows: Sequence[Row], *, iteration: int = 0) -> list[list[Row]]:
        """Per-instance row lists in admission order; every row appears exactly once."""
        plan = self.split(rows, iteration=iteration)
        return [[rows[i] for i in a.prompt_indices] for a in plan.assignments]

    def observe(self, rows: Sequence[Row], lengths: Sequence[int]) -> None:  # noqa: B027
        """Response lengths of finished samples (feeds the ranker; no-op for blind policies)."""

    def end_iteration(self) -> None:  # noqa: B027
        """Called once per iteration after all observations."""


class RandomDispatch(DispatchPolicy):
    name = "random"

    def __init__(self, *, n_instances: int, max_batch_size: int, seed: int = 0):
        super().__init__(n_instances=n_instances, max_batch_size=max_batch_size)
        self.seed = seed

    def split(self, rows: Sequence[Row], *, iteration: int = 0) -> SplitPlan:
        return random_split(len(rows), self.n_instances, seed=self.seed * 1_000_003 + iteration,
                            max_batch_size=self.max_batch_size)


class RoundRobinDispatch(DispatchPolicy):
    name = "round_robin"

    def split(self, rows: Sequence[Row], *, iteration: int = 0) -> SplitPlan:
        return round_robin_split(len(rows), self.n_instances, max_batch_size=self.max_batch_size)


class SkewAwareDispatch(DispatchPolicy):
    name = "skew_aware"

    def __init__(self, *, n_instances: int, max_batch_size: int, ptl: PTLProfile, ranker: LengthRanker,
                 alpha: float = 0.2):
        super().__init__(n_instances=n_instances, max_batch_size=max_batch_size)
        self.ptl, self.ranker, self.alpha = ptl, ranker, alpha

    def split(self, rows: Sequence[Row], *, iteration: int = 0) -> SplitPlan:
        ids = [str(r["prompt_id"]) for r in rows]
        predicted = self.ranker.predict(ids, [str(r["prompt"]) for r in rows])
        self.last_predicted = predicted
        return skew_aware_split(predicted, self.n_instances, self.ptl, recent_lengths=self.ranker.recent_lengths(),
                                alpha=self.alpha, max_batch_size=self.max_batch_size)

    def observe(self, rows: Sequence[Row], lengths: Sequence[int]) -> None:
        self.ranker.observe_many([str(r["prompt_id"]) for r in rows], [str(r["prompt"]) for r in rows], lengths)

    def end_iteration(self) -> None:
        self.ranker.refit()


def setup_dispatch(
    policy: str,
    *,
    n_instances: int,
    max_batch_size: int,
    alpha: float = 0.2,
    ptl: PTLProfile | None = None,
    ranker: LengthRanker | None = None,
    seed: int = 0,
) -> DispatchPolicy:
    """Build a dispatch policy by name (`DispatchSpec.policy`). `skew_aware` needs the engine's PTL profile."""
    if policy == "random":
        return RandomDispatch(n_instances=n_instances, max_batch_size=max_batch_size, seed=seed)
    if policy == "round_robin":
        return RoundRobinDispatch(n_instances=n_instances, max_batch_size=max_batch_size)
    if policy == "skew_aware":
        if ptl is None:
            raise ValueError("dispatch policy 'skew_aware' needs a PTL profile (see workers.dispatch.ptl.measure_ptl)")
        return SkewAwareDispatch(n_instances=n_instances, max_batch_size=max_batch_size, ptl=ptl,
                                 ranker=ranker if ranker is not None else FeatureRidgeRanker(), alpha=alpha)
    raise ValueError(f"unknown dispatch policy {policy!r}; choose one of {list(POLICIES)}")
