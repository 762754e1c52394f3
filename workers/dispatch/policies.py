"""Dispatch policies: which generation instance gets which prompt, in what order (docs/architecture.md).

    policy = setup_dispatch("skew_aware", n_instances=4, max_batch_size=32, ptl=profile, ranker=ranker)
    per_instance = policy.assign(rows)       # list (one per instance) of rows, in admission order
    ... after generation: policy.observe(rows, lengths); policy.end_iteration()   # refit the ranker
    # the runtime's PromptDispatcher keeps one policy per job, updating `n_instances` and `ptl` as they change

`random` (shuffle, equal shares, FIFO), `round_robin` (i mod N, FIFO) and `skew_aware` (paper Algorithm 2 on the
ranker's predictions, longest-predicted-first inside an instance; the engine's continuous batching backfills).
Rows are dataset rows: dicts with `prompt` and `prompt_id`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from contract.skew import PTLProfile, SplitPlan, random_split, round_robin_split, skew_aware_split
from contract.spec import DispatchPolicy as DispatchPolicyName
from workers.dispatch.ranker import FeatureRidgeRanker, LengthRanker

POLICIES: tuple[str, ...] = get_args(DispatchPolicyName)
Row = Mapping[str, Any]


class DispatchPolicy(ABC):
    """One per job: owns the length ranker (every policy predicts, so recall is measured whatever the policy) and
    its observe/refit cycle; `n_instances` (elastic) and `ptl` (measured once an instance profiled) may change
    between iterations."""

    name: str

    def __init__(self, *, n_instances: int, max_batch_size: int, ranker: LengthRanker | None = None):
        if n_instances < 1 or max_batch_size < 1:
            raise ValueError(f"need n_instances >= 1 and max_batch_size >= 1 (got {n_instances}, {max_batch_size})")
        self.n_instances, self.max_batch_size = n_instances, max_batch_size
        self.ranker = ranker if ranker is not None else FeatureRidgeRanker()
        self.last_predicted: list[float] | None = None  # predictions behind the last split

    def predict(self, rows: Sequence[Row]) -> list[float]:
        return self.ranker.predict([str(r["prompt_id"]) for r in rows], [str(r["prompt"]) for r in rows])

    def split(self, rows: Sequence[Row], *, iteration: int = 0, predicted: Sequence[float] | None = None) -> SplitPlan:
        """Per-instance prompt indices; `predicted` (from `predict`) saves predicting twice."""
        self.last_predicted = list(predicted) if predicted is not None else self.predict(rows)
        return self._split(rows, iteration, self.last_predicted)

    @abstractmethod
    def _split(self, rows: Sequence[Row], iteration: int, predicted: Sequence[float]) -> SplitPlan: ...

    def assign(self, rows: Sequence[Row], *, iteration: int = 0) -> list[list[Row]]:
        """Per-instance row lists in admission order; every row appears exactly once."""
        plan = self.split(rows, iteration=iteration)
        return [[rows[i] for i in a.prompt_indices] for a in plan.assignments]

    def observe(self, rows: Sequence[Row], lengths: Sequence[int]) -> None:
        """Response lengths of finished samples (fed to the ranker)."""
        self.ranker.observe_many([str(r["prompt_id"]) for r in rows], [str(r["prompt"]) for r in rows], lengths)

    def end_iteration(self) -> None:
        """Called once per iteration after all observations: refit the ranker."""
        self.ranker.refit()


class RandomDispatch(DispatchPolicy):
    name = "random"

    def __init__(self, *, n_instances: int, max_batch_size: int, ranker: LengthRanker | None = None, seed: int = 0):
        super().__init__(n_instances=n_instances, max_batch_size=max_batch_size, ranker=ranker)
        self.seed = seed

    def _split(self, rows: Sequence[Row], iteration: int, predicted: Sequence[float]) -> SplitPlan:
        return random_split(len(rows), self.n_instances, seed=self.seed * 1_000_003 + iteration,
                            max_batch_size=self.max_batch_size)


class RoundRobinDispatch(DispatchPolicy):
    name = "round_robin"

    def _split(self, rows: Sequence[Row], iteration: int, predicted: Sequence[float]) -> SplitPlan:
        return round_robin_split(len(rows), self.n_instances, max_batch_size=self.max_batch_size)


class SkewAwareDispatch(DispatchPolicy):
    name = "skew_aware"

    def __init__(self, *, n_instances: int, max_batch_size: int, ptl: PTLProfile, ranker: LengthRanker | None = None,
                 alpha: float = 0.2):
        super().__init__(n_instances=n_instances, max_batch_size=max_batch_size, ranker=ranker)
        self.ptl, self.alpha = ptl, alpha

    def _split(self, rows: Sequence[Row], iteration: int, predicted: Sequence[float]) -> SplitPlan:
        return skew_aware_split(predicted, self.n_instances, self.ptl, recent_lengths=self.ranker.recent_lengths(),
                                alpha=self.alpha, max_batch_size=self.max_batch_size)


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
        return RandomDispatch(n_instances=n_instances, max_batch_size=max_batch_size, ranker=ranker, seed=seed)
    if policy == "round_robin":
        return RoundRobinDispatch(n_instances=n_instances, max_batch_size=max_batch_size, ranker=ranker)
    if policy == "skew_aware":
        if ptl is None:
            raise ValueError("dispatch policy 'skew_aware' needs a PTL profile (see workers.dispatch.ptl.measure_ptl)")
        return SkewAwareDispatch(n_instances=n_instances, max_batch_size=max_batch_size, ptl=ptl, ranker=ranker,
                                 alpha=alpha)
    raise ValueError(f"unknown dispatch policy {policy!r}; choose one of {list(POLICIES)}")
