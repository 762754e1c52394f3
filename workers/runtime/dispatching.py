"""Driver side of dispatch: this iteration's prompts become requests, the job's policy splits them over instances.

One `DispatchPolicy` per job (workers/dispatch/policies.py) owns the length ranker and its observe/refit cycle; the
dispatcher predicts each iteration's lengths once, hands them to the policy's split and keeps them for the recall
metrics. A prompt's `group_size` requests all go to one instance, in the split's order (longest predicted first for
skew_aware). The PTL profile an instance measured is read until it exists, then kept. Requests of an instance that
stopped or died are drained from its stream and spread over live instances.
"""

from __future__ import annotations

from typing import Any

from contract.reporter import Reporter
from contract.sample import PromptRequest, Sample
from contract.skew import PTLProfile, ptl_from_json
from contract.spec import JobSpec
from workers.core.prompts import PromptSchedule, TokenCache, make_requests
from workers.dispatch.cost import sample_cost
from workers.dispatch.policies import DispatchPolicy, setup_dispatch
from workers.stream import PromptQueue

FLAT_PTL = PTLProfile(((1, 1.0),))


class PromptDispatcher:
    def __init__(self, spec: JobSpec, schedule: PromptSchedule, encode: TokenCache, *, job_id: int,
                 reporter: Reporter, queues: Any = None, epoch: int = 0):
        """`queues(instance_id) -> PromptQueue` (None: this dispatcher only builds requests, e.g. colocated)."""
        self.spec, self.schedule, self.encode, self.job_id, self.reporter = spec, schedule, encode, job_id, reporter
        self.queues, self.epoch = queues, epoch
        self.group_size = spec.algorithm.group_size
        self.policy: DispatchPolicy = setup_dispatch(
            spec.dispatch.policy, n_instances=1, max_batch_size=max(1, spec.generation.batch_size // self.group_size),
            alpha=spec.dispatch.alpha, ptl=FLAT_PTL, seed=spec.seed)
        self.ptl_known = False
        self.touched: set[str] = set()  # instances that ever received requests
        self.predictions: dict[int, dict[str, float]] = {}  # iteration -> group id -> predicted length at dispatch
        self.long_tail_instances: dict[int, int] = {}  # iteration -> instances Algorithm 2 gave the long tail

    # -- which prompts -------------------------------------------------------------------------------------------------
    def requests_for(self, iteration: int, min_version: int) -> list[list[PromptRequest]]:
        """One list of `group_size` requests per prompt slot of `iteration` (predicting lengths once)."""
        rows = self.schedule.rows_for(iteration)
        predicted = self.policy.predict(rows)
        groups = make_requests(rows, iteration, group_size=self.group_size, encode=self.encode,
                             job_seed=self.spec.seed, min_version=min_version, predicted=predicted,
                             epoch=self.epoch)
        self.predictions[iteration] = {g[0].group_id: g[0].predicted_len for g in groups}
        return groups

    # -- where they go -------------------------------------------------------------------------------------------------
    def dispatch(self, iteration: int, instances: list[str], min_version: int) -> int:
        assert instances and self.queues is not None, "dispatch needs instances and queues"
        groups = self.requests_for(iteration, min_version)
        self._refresh_ptl()
        self.policy.n_instances = len(instances)
        predicted = [g[0].predicted_len for g in groups]
        plan = self.policy.split(self.schedule.rows_for(iteration), iteration=iteration,
                                                  predicted=predicted)
        self.long_tail_instances[iteration] = plan.n_long_instances
        for assignment in plan.assignments:
            requests = [r for index in assignment.prompt_indices for r in groups[index]]
            if requests:
                self.queues(instances[assignment.instance]).put(requests)
                self.touched.add(instances[assignment.instance])
        return sum(len(g) for g in groups)

    def send(self, requests: list[PromptRequest], instances: list[str]) -> None:
        """Spread loose requests (re-dispatched or regenerated) over `instances`, longest predicted first."""
        assert instances and self.queues is not None, "send needs instances and queues"
        ordered = sorted(requests, key=lambda r: -r.predicted_len)
        for i, instance in enumerate(instances):
            share = ordered[i :: len(instances)]
            if share:
                self.queues(instance).put(share)
                self.touched.add(instance)

    def drain(self, instance: str) -> list[PromptRequest]:
        assert self.queues is not None
        self.touched.discard(instance)
        queue: PromptQueue = self.queues(instance)
        return queue.drain()

    # -- learning ------------------------------------------------------------------------------------------------------
    def observe(self, samples: list[Sample]) -> None:
        """One iteration's samples: every sample's cost (its length; for an episode its turns too,
        workers/dispatch/cost.py) to the ranker, then one refit."""
        self.policy.observe([{"prompt_id": s.prompt_id, "prompt": s.prompt_text} for s in samples],
                            [sample_cost(s) for s in samples])
        self.policy.end_iteration()

    def _refresh_ptl(self) -> None:
        if self.ptl_known or not self.policy.needs_ptl:
            return
        points = self.reporter.load_ptl(self.job_id)
        if points:
            self.policy.ptl, self.ptl_known = per_prompt(ptl_from_json(points), self.group_size), True


def per_prompt(ptl: PTLProfile, group_size: int) -> PTLProfile:
    """PTL by prompts in flight (each prompt is `group_size` sequences)."""
    points: dict[int, float] = {}
    for bs, seconds in ptl.points:
        points.setdefault(max(1, round(bs / group_size)), seconds)
    return PTLProfile(tuple(points.items()))
