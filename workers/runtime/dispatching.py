"""Driver side of dispatch: which prompts an iteration uses, how they split over instances, and re-dispatch.

Iteration j takes `prompts_per_iteration` rows from a per-epoch shuffle of the dataset (seeded, so every mode sees
the same prompts). Each prompt becomes `group_size` requests with deterministic ids `<j>:<slot>:<k>` (group id
`<j>:<slot>`), all sent to one instance, in the order the split plan gives (longest predicted first for skew_aware).
Requests of an instance that stopped or died are drained from its stream and spread over live instances.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import redis

from contract.skew import PTLProfile, SplitPlan
from contract.spec import JobSpec
from workers.dispatch.policies import setup_dispatch
from workers.runtime.ranking import RuntimeRanker
from workers.stream import PromptQueue, PromptRequest

FLAT_PTL = PTLProfile(((1, 1.0),))


def iteration_of(group_or_sample_id: str) -> int:
    return int(group_or_sample_id.split(":", 1)[0])


def request_seed(job_seed: int, sample_id: str) -> int:
    return (job_seed * 1_000_003 + zlib.crc32(sample_id.encode())) & 0x7FFFFFFF


class PromptDispatcher:
    def __init__(self, client: redis.Redis, job_id: int, spec: JobSpec, rows: list[dict[str, Any]],
                 encode: Any):
        self.client, self.job_id, self.spec, self.rows = client, job_id, spec, rows
        self.encode = encode  # str -> list[int]
        self.group_size = spec.algorithm.group_size
        self.ranker = RuntimeRanker()
        self.touched: set[str] = set()  # instances that ever received requests
        self.last_plan: SplitPlan | None = None
        self._token_cache: dict[str, list[int]] = {}
        self.predictions: dict[int, dict[str, float]] = {}  # iteration -> group id -> predicted length at dispatch

    # -- which prompts -------------------------------------------------------------------------------------------------
    def rows_for(self, iteration: int) -> list[dict[str, Any]]:
        per_iter, n = self.spec.training.prompts_per_iteration, len(self.rows)
        out = []
        for slot in range(per_iter):
            flat = iteration * per_iter + slot
            epoch, offset = divmod(flat, n)
            order = list(range(n))
            random.Random(f"{self.spec.seed}:epoch:{epoch}").shuffle(order)
            out.append(self.rows[order[offset]])
        return out

    def requests_for(self, iteration: int, min_version: int) -> list[list[PromptRequest]]:
        """One list of `group_size` requests per prompt slot of `iteration`."""
        groups = []
        rows = self.rows_for(iteration)
        predicted = self.ranker.predict(rows)
        self.predictions[iteration] = {f"{iteration}:{slot}": float(p) for slot, p in enumerate(predicted)}
        for slot, (row, pred) in enumerate(zip(rows, predicted, strict=True)):
            prompt = str(row["prompt"])
            if prompt not in self._token_cache:
                self._token_cache[prompt] = list(self.encode(prompt))
            meta = {k: v for k, v in row.items() if k not in ("prompt",)}
            group_id = f"{iteration}:{slot}"
            groups.append([
                PromptRequest(sample_id=f"{group_id}:{k}", group_id=group_id, prompt_id=str(row["prompt_id"]),
                              iteration=iteration, prompt_ids=self._token_cache[prompt], prompt_text=prompt,
                              meta=meta, predicted_len=float(pred), min_version=min_version,
                              seed=request_seed(self.spec.seed, f"{group_id}:{k}"))
                for k in range(self.group_size)
            ])
        return groups

    # -- where they go -------------------------------------------------------------------------------------------------
    def plan(self, iteration: int, n_instances: int, ptl: PTLProfile | None) -> SplitPlan:
        """The dispatch policy's split of this iteration's prompts (units: prompts, each `group_size` sequences)."""
        policy = setup_dispatch(self.spec.dispatch.policy, n_instances=n_instances,
                                max_batch_size=max(1, self.spec.generation.batch_size // self.group_size),
                                alpha=self.spec.dispatch.alpha, ptl=_per_prompt(ptl, self.group_size),
                                ranker=self.ranker.ranker, seed=self.spec.seed)
        return policy.split(self.rows_for(iteration), iteration=iteration)

    def dispatch(self, iteration: int, instances: list[str], min_version: int, ptl: PTLProfile | None) -> int:
        assert instances, "dispatch needs at least one instance"
        groups = self.requests_for(iteration, min_version)
        self.last_plan = plan = self.plan(iteration, len(instances), ptl)
        for assignment in plan.assignments:
            instance = instances[assignment.instance]
            requests = [r for index in assignment.prompt_indices for r in groups[index]]
            if requests:
                PromptQueue(self.client, self.job_id, instance).put(requests)
                self.touched.add(instance)
        return sum(len(g) for g in groups)

    def send(self, requests: list[PromptRequest], instances: list[str]) -> None:
        """Spread loose requests (re-dispatched or regenerated) over `instances`, longest predicted first."""
        assert instances, "send needs at least one instance"
        ordered = sorted(requests, key=lambda r: -r.predicted_len)
        for i, instance in enumerate(instances):
            share = ordered[i :: len(instances)]
            if share:
                PromptQueue(self.client, self.job_id, instance).put(share)
                self.touched.add(instance)

    def drain(self, instance: str) -> list[PromptRequest]:
        self.touched.discard(instance)
        return PromptQueue(self.client, self.job_id, instance).drain()


def _per_prompt(ptl: PTLProfile | None, group_size: int) -> PTLProfile:
    """PTL by prompts in flight (each prompt is `group_size` sequences)."""
    if ptl is None:
        return FLAT_PTL
    points: dict[int, float] = {}
    for bs, seconds in ptl.points:
        points.setdefault(max(1, round(bs / group_size)), seconds)
    return PTLProfile(tuple(points.items()))
