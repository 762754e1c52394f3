"""Dispatch policies: which generation instance gets which prompt, in what order (docs/architecture.md).

    policy = setup_dispatch("skew_aware", n_instances=4, max_batch_size=32, ptl=profile, ranker=ranker)
    per_instance = policy.assign(rows)       # list (one per instance) of rows, in admission order
    ... after generation: policy.observe(rows, lengths); policy.end_iteration()   # refit the ranker
    # the runtime's PromptDispatcher keeps one policy per job, updating `n_instances` and `ptl` as they change

The policies themselves (random, round robin, skew-aware, ...) are the split rules registered in contract/dispatch.py,
shared with the planner's simulator; this class adds what a running job needs around them: the length ranker, the
iteration-dependent seed, the instance count and PTL profile as they change. Rows are dataset rows: dicts with
`prompt` and `prompt_id`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.dispatch import DISPATCH_POLICIES, SplitRequest, policy_rule, split
from contract.prompt_rows import prompt_display
from contract.skew import PTLProfile, SplitPlan
from workers.dispatch.ranker import FeatureRidgeRanker, LengthRanker

Row = Mapping[str, Any]


class DispatchPolicy:
    """One per job: owns the length ranker (every policy predicts, so recall is measured whatever the policy) and
    its observe/refit cycle; `n_instances` (elastic) and `ptl` (measured once an instance profiled) may change
    between iterations."""

    def __init__(self, name: str, *, n_instances: int, max_batch_size: int, ranker: LengthRanker | None = None,
                 ptl: PTLProfile | None = None, alpha: float = 0.2, seed: int = 0):
        if n_instances < 1 or max_batch_size < 1:
            raise ValueError(f"need n_instances >= 1 and max_batch_size >= 1 (got {n_instances}, {max_batch_size})")
        self.name, self.n_instances, self.max_batch_size = name, n_instances, max_batch_size
        self.ranker = ranker if ranker is not None else FeatureRidgeRanker()
        self.ptl, self.alpha, self.seed = ptl, alpha, seed
        self.needs_ptl = bool(DISPATCH_POLICIES.entry(name).meta.get("needs_ptl"))
        self.last_predicted: list[float] | None = None  # predictions behind the last split

    def predict(self, rows: Sequence[Row]) -> list[float]:
        return self.ranker.predict([str(r["prompt_id"]) for r in rows], [prompt_display(r["prompt"]) for r in rows])

    def split(self, rows: Sequence[Row], *, iteration: int = 0, predicted: Sequence[float] | None = None) -> SplitPlan:
        """Per-instance prompt indices; `predicted` (from `predict`) saves predicting twice."""
        self.last_predicted = list(predicted) if predicted is not None else self.predict(rows)
        return split(self.name, SplitRequest(
            predicted=self.last_predicted, n_instances=self.n_instances, max_batch_size=self.max_batch_size,
            seed=self.seed * 1_000_003 + iteration, ptl=self.ptl, recent_lengths=self.ranker.recent_lengths(),
            alpha=self.alpha))

    def assign(self, rows: Sequence[Row], *, iteration: int = 0) -> list[list[Row]]:
        """Per-instance row lists in admission order; every row appears exactly once."""
        plan = self.split(rows, iteration=iteration)
        return [[rows[i] for i in a.prompt_indices] for a in plan.assignments]

    def observe(self, rows: Sequence[Row], lengths: Sequence[int]) -> None:
        """Response lengths of finished samples (fed to the ranker)."""
        self.ranker.observe_many([str(r["prompt_id"]) for r in rows], [prompt_display(r["prompt"]) for r in rows],
                                 lengths)

    def end_iteration(self) -> None:
        """Called once per iteration after all observations: refit the ranker."""
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
    """Build a dispatch policy by name (`DispatchSpec.policy`); a policy registered with needs_ptl (skew-aware) needs
    the engine's PTL profile."""
    policy_rule(policy, ptl)  # an unknown name, or no PTL profile where one is needed: ValueError
    return DispatchPolicy(policy, n_instances=n_instances, max_batch_size=max_batch_size, ranker=ranker, ptl=ptl,
                          alpha=alpha, seed=seed)
