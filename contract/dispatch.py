"""Dispatch policies by name: how one iteration's prompts are split over the generation instances.

Each policy is a split rule of contract/skew.py over a `SplitRequest`, registered here under the name a spec's
`dispatch.policy` gives (contract/registry.py). The runtime's dispatcher (workers/dispatch/policies.py) and the
planner's simulator (backend/planner/sim_generation.py) both split through this table, so they never disagree on what
a name means; a new policy is one function here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contract.registry import Registry
from contract.skew import PTLProfile, SplitPlan, random_split, round_robin_split, skew_aware_split


@dataclass(frozen=True)
class SplitRequest:
    predicted: Sequence[float]  # predicted output length per prompt (the ranker's)
    n_instances: int
    max_batch_size: int  # prompts an instance runs at once
    seed: int = 0  # random: the shuffle's seed
    ptl: PTLProfile | None = None  # policies registered with needs_ptl=True: the per-token latency profile
    recent_lengths: Sequence[float] = ()  # recent output lengths (group length estimates)
    alpha: float = 0.2  # share of prompts treated as long-tail


Split = Callable[[SplitRequest], SplitPlan]
DISPATCH_POLICIES: Registry[Split] = Registry("dispatch policy")


@DISPATCH_POLICIES.register("random", label="random")
def random_policy(request: SplitRequest) -> SplitPlan:
    """Shuffle the prompts and deal equal shares; first in, first out inside an instance."""
    return random_split(len(request.predicted), request.n_instances, seed=request.seed,
                        max_batch_size=request.max_batch_size)


@DISPATCH_POLICIES.register("round_robin", label="round robin")
def round_robin_policy(request: SplitRequest) -> SplitPlan:
    """Prompt i to instance i mod N; first in, first out inside an instance."""
    return round_robin_split(len(request.predicted), request.n_instances, max_batch_size=request.max_batch_size)


@DISPATCH_POLICIES.register("skew_aware", label="skew-aware", needs_ptl=True)
def skew_aware_policy(request: SplitRequest) -> SplitPlan:
    """Paper Algorithm 2: the predicted long tail on few instances with small batches; longest predicted first."""
    assert request.ptl is not None, "registered with needs_ptl"
    return skew_aware_split(request.predicted, request.n_instances, request.ptl,
                            recent_lengths=request.recent_lengths, alpha=request.alpha,
                            max_batch_size=request.max_batch_size)


def policy_rule(policy: str, ptl: PTLProfile | None) -> Split:
    """The named policy's split rule; ValueError for an unknown name, or a missing PTL profile where it needs one."""
    rule = DISPATCH_POLICIES.get(policy)
    if DISPATCH_POLICIES.entry(policy).meta.get("needs_ptl") and ptl is None:
        raise ValueError(f"dispatch policy {policy!r} needs a PTL profile (see workers.dispatch.ptl.measure_ptl)")
    return rule


def split(policy: str, request: SplitRequest) -> SplitPlan:
    return policy_rule(policy, request.ptl)(request)
