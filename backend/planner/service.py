"""Plan a job's resources: Algorithm 1 on profiles, then simulate each mode on the chosen allocation.

`make_plan` serves `POST /api/v1/plans` and `streamrl plan`; `suggest_instances` gives a JobSpec without an explicit
instance count its generation instances. Bad input raises ValueError with a message naming the field.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from backend.planner.allocation import Allocation, build_profiles, plan_one_cluster, plan_two_clusters
from backend.planner.costmodel import TrainCost
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec, ModelShape, default_tp, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.schemas import AllocationPublic, PlanPublic, PlanRequest, PredictionPublic, SpanPublic
from backend.planner.simulator import COLOCATED_NOT_SHARED, SimConfig, SimResult, simulate
from contract.skew import PTLProfile
from contract.spec import JobSpec


def _device(catalog: dict[str, DeviceSpec], name: str, field: str) -> DeviceSpec:
    for key, spec in catalog.items():
        if key.lower() == name.strip().lower():
            return spec
    raise ValueError(f"{field}: unknown device {name!r}; the catalog has {', '.join(sorted(catalog))}")


def _lengths(req: PlanRequest) -> LengthDistribution:
    spec = req.lengths
    if spec.kind == "empirical":
        return LengthDistribution.empirical(spec.values, max_tokens=spec.max_tokens)
    return LengthDistribution(
        kind=spec.kind, max_tokens=spec.max_tokens, median=spec.median, sigma=spec.sigma,
        pareto_alpha=spec.pareto_alpha, pareto_min=spec.pareto_min,
    )


def _prediction(result: SimResult, cost_per_hour: float) -> PredictionPublic:
    summary = result.summary()
    return PredictionPublic(
        mode=result.config.mode,
        iteration_seconds=summary["iteration_seconds"],
        gen_seconds=summary["gen_seconds"],
        train_seconds=summary["train_seconds"],
        samples_per_s=summary["samples_per_s"],
        tokens_per_s=summary["tokens_per_s"],
        throughput_per_cost=summary["samples_per_s"] / cost_per_hour,
        gen_bubble_fraction=summary["gen_bubble_fraction"],
        train_bubble_fraction=summary["train_bubble_fraction"],
        shared_jobs=result.config.shared_jobs,
    )


def _keep_lane(lane: str, lanes: int) -> bool:
    return lane == "trainer" or (lane.startswith("gen-") and int(lane[4:]) < lanes)


@dataclass(frozen=True)
class _Pools:
    """The devices a plan may use: generation on `gen_device` x `gen_count`; training on the same pool
    (one cluster) or on `train_device` x `train_count` (two clusters)."""

    gen_device: DeviceSpec
    gen_count: int
    train_device: DeviceSpec
    train_count: int | None  # None: one cluster
    tp: int

    @property
    def two_clusters(self) -> bool:
        return self.train_count is not None

    @property
    def gen_pool_cost(self) -> float:
        return self.gen_count * self.gen_device.cost_per_hour


def _pools(req: PlanRequest, catalog: dict[str, DeviceSpec], shape: ModelShape) -> _Pools:
    """Resolve the clusters against the catalog; one generation instance (plus a trainer) must fit."""
    gen_cluster = req.clusters[0]
    train_cluster = req.clusters[1] if len(req.clusters) == 2 else None
    gen_device = _device(catalog, gen_cluster.device, "clusters[0].device")
    train_device = _device(catalog, train_cluster.device, "clusters[1].device") if train_cluster else gen_device
    pools = _Pools(
        gen_device=gen_device,
        gen_count=gen_cluster.count,
        train_device=train_device,
        train_count=train_cluster.count if train_cluster else None,
        tp=req.tp or default_tp(shape, gen_device),
    )
    if pools.gen_count < pools.tp:
        raise ValueError(f"clusters[0].count: {pools.gen_count} devices cannot hold one "
                         f"{pools.tp}-way generation instance")
    if train_cluster is None and req.mode != "colocated" and pools.gen_count < pools.tp + 1:
        raise ValueError(f"clusters[0].count: one cluster needs tp + 1 = {pools.tp + 1} devices "
                         "for sync/async")
    return pools


def _base_config(req: PlanRequest, shape: ModelShape, pools: _Pools) -> SimConfig:
    """The simulated job; device counts and mode are filled in per simulated mode."""
    measured_ptl = PTLProfile(tuple(req.ptl_profile)) if req.ptl_profile else None
    measured_train = TrainCost(req.train_seconds_per_token) if req.train_seconds_per_token else None
    return SimConfig(
        model=shape, gen_device=pools.gen_device, train_device=pools.train_device, tp=pools.tp,
        gen_devices=pools.tp, train_devices=1, mode="sync",  # placeholders: set per simulated mode
        lengths=_lengths(req), prompts_per_iteration=req.prompts_per_iteration, group_size=req.group_size,
        prompt_tokens=req.prompt_tokens, dispatch=req.dispatch, alpha=req.alpha,
        max_batch_size=req.max_batch_size, algorithm=req.algorithm, mfu=req.mfu,
        max_staleness=req.max_staleness, iterations=req.iterations, seed=req.seed,
        elastic=req.elastic, length_growth=req.length_growth, ptl=measured_ptl, train=measured_train,
        shared_jobs=req.shared_jobs, tail_tokens_per_forward=req.tail_tokens_per_forward or 1.0,
    )


def _allocate(base: SimConfig, pools: _Pools) -> Allocation | None:
    """Algorithm 1 on profiles of `base`; None when one cluster is too small to disaggregate."""
    profiles = build_profiles(base, pools.gen_count)
    if pools.train_count is not None:
        return plan_two_clusters(profiles, pools.gen_count, pools.train_count, pools.tp, pools.gen_device,
                                 pools.train_device, shared_jobs=base.shared_jobs)
    if pools.gen_count >= pools.tp + 1:
        return plan_one_cluster(profiles, pools.gen_count, pools.tp, pools.gen_device, shared_jobs=base.shared_jobs)
    return None


def _simulate_modes(
    base: SimConfig, pools: _Pools, alloc: Allocation | None
) -> tuple[dict[str, SimResult], dict[str, PredictionPublic]]:
    """Simulate colocated on the whole pool (one cluster only; never shared: shared_jobs 1, at the whole pool's
    price) and sync/async on the allocation, if any (sharing the generation instances as the request says)."""
    results: dict[str, SimResult] = {}
    per_mode: dict[str, PredictionPublic] = {}
    if not pools.two_clusters:
        colocated_devices = (pools.gen_count // pools.tp) * pools.tp
        colocated = replace(base, mode="colocated", gen_devices=colocated_devices, shared_jobs=1)
        results["colocated"] = simulate(colocated)
        per_mode["colocated"] = _prediction(results["colocated"], pools.gen_pool_cost)
    if alloc is None:
        return results, per_mode
    # elastic growth: two clusters may use the whole generation cluster;
    # on one cluster, growing would take the trainer's devices
    spare_instances = pools.gen_count // pools.tp if pools.two_clusters else alloc.gen_instances
    for mode in ("sync", "async"):
        config = replace(
            base, mode=mode, gen_devices=alloc.gen_devices, train_devices=alloc.train_devices,
            elastic_max_instances=spare_instances,
        )
        results[mode] = simulate(config)
        per_mode[mode] = _prediction(results[mode], alloc.cost_per_hour)
    return results, per_mode


def _allocation_public(
    mode: str, pools: _Pools, alloc: Allocation | None, chosen: SimResult
) -> AllocationPublic:
    if mode == "colocated" or alloc is None:  # one pool does both stages, nothing is freed
        used = chosen.config.gen_devices
        return AllocationPublic(
            gen_device=pools.gen_device.name, gen_devices=used, gen_instances=chosen.config.instances, tp=pools.tp,
            train_device=pools.gen_device.name, train_devices=used, freed_devices=0, cost_per_hour=pools.gen_pool_cost,
        )
    return AllocationPublic(
        gen_device=pools.gen_device.name, gen_devices=alloc.gen_devices, gen_instances=alloc.gen_instances,
        tp=pools.tp, train_device=pools.train_device.name, train_devices=alloc.train_devices,
        freed_devices=alloc.freed_devices, cost_per_hour=alloc.cost_per_hour,
    )


def _estimate(alloc: Allocation | None) -> dict[str, float]:
    """Algorithm 1's own profile numbers for the chosen allocation."""
    if alloc is None:
        return {}
    return {"gen_seconds": alloc.gen_seconds, "train_seconds": alloc.train_seconds,
            "iteration_seconds": alloc.iteration_seconds}


def recommended_mode(per_mode: dict[str, PredictionPublic]) -> str:
    """The mode the plan recommends: the most samples/s of those simulated, ties broken by samples/s per cost (so
    the recommendation is never a mode the plan's own table shows slower)."""
    return max(per_mode, key=lambda mode: (per_mode[mode].samples_per_s, per_mode[mode].throughput_per_cost))


def make_plan(req: PlanRequest, catalog: dict[str, DeviceSpec] | None = None) -> PlanPublic:
    started = time.perf_counter()
    if req.mode == "colocated" and req.shared_jobs > 1:  # PlanRequest refuses it; model_copy(update=) skips that
        raise ValueError(COLOCATED_NOT_SHARED)
    size = req.model_params_b if req.model_params_b is not None else (req.model_size or "")
    shape = model_shape(size)
    pools = _pools(req, catalog or DEFAULT_DEVICES, shape)
    base = _base_config(req, shape, pools)
    alloc = _allocate(base, pools)
    results, per_mode = _simulate_modes(base, pools, alloc)
    chosen = results[req.mode]
    best = recommended_mode(per_mode)
    kept_spans = [span for span in chosen.spans if _keep_lane(span.lane, req.timeline_lanes)]
    return PlanPublic(
        model=shape.to_dict(),
        allocation=_allocation_public(req.mode, pools, alloc, chosen),
        estimate=_estimate(alloc),
        predicted=per_mode[req.mode],
        per_mode=per_mode,
        recommended_mode=best,
        recommended_allocation=_allocation_public(best, pools, alloc, results[best]),
        timeline=[SpanPublic(**span.to_dict()) for span in kept_spans],
        plan_seconds=time.perf_counter() - started,
    )


def suggest_instances(spec: JobSpec, max_instances: int) -> int:
    """Generation instances for a job that did not state them: enough instances that each runs full batches of
    `generation.batch_size` over the iteration's samples (more only adds long-tail bubbles), within the job's
    autoscale bounds and `max_instances` (quota). Always >= 1."""
    samples = spec.training.prompts_per_iteration * spec.algorithm.group_size
    wanted = max(1, math.ceil(samples / spec.generation.batch_size))
    if spec.autoscale.policy == "auto":
        wanted = min(max(wanted, spec.autoscale.min_instances), spec.autoscale.max_instances)
    return max(1, min(wanted, max_instances))
