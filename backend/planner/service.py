"""Plan a job's resources: Algorithm 1 on profiles, then simulate each mode on the chosen allocation.

`make_plan` serves `POST /api/v1/plans` and `streamrl plan`; `suggest_instances` gives a JobSpec without an explicit
instance count its generation instances. Bad input raises ValueError with a message naming the field.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from backend.planner.allocation import Allocation, build_profiles, plan_one_cluster, plan_two_clusters
from backend.planner.costmodel import TrainCost
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec, default_tp, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.schemas import AllocationPublic, PlanPublic, PlanRequest, PredictionPublic, SpanPublic
from backend.planner.simulator import SimConfig, SimResult, simulate
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
    return LengthDistribution(kind=spec.kind, max_tokens=spec.max_tokens, median=spec.median, sigma=spec.sigma,
                              pareto_alpha=spec.pareto_alpha, pareto_min=spec.pareto_min)


def _prediction(result: SimResult, cost_per_hour: float) -> PredictionPublic:
    s = result.summary()
    return PredictionPublic(
        mode=result.config.mode, iteration_seconds=s["iteration_seconds"], gen_seconds=s["gen_seconds"],
        train_seconds=s["train_seconds"], samples_per_s=s["samples_per_s"], tokens_per_s=s["tokens_per_s"],
        throughput_per_cost=s["samples_per_s"] / cost_per_hour, gen_bubble_fraction=s["gen_bubble_fraction"],
        train_bubble_fraction=s["train_bubble_fraction"],
    )


def _keep_lane(lane: str, lanes: int) -> bool:
    return lane == "trainer" or (lane.startswith("gen-") and int(lane[4:]) < lanes)


def make_plan(req: PlanRequest, catalog: dict[str, DeviceSpec] | None = None) -> PlanPublic:
    started = time.perf_counter()
    catalog = catalog or DEFAULT_DEVICES
    shape = model_shape(req.model_params_b if req.model_params_b is not None else (req.model_size or ""))
    gen_dev = _device(catalog, req.clusters[0].device, "clusters[0].device")
    two = len(req.clusters) == 2
    train_dev = _device(catalog, req.clusters[1].device, "clusters[1].device") if two else gen_dev
    tp = req.tp or default_tp(shape, gen_dev)
    n_gen_pool = req.clusters[0].count
    if n_gen_pool < tp:
        raise ValueError(f"clusters[0].count: {n_gen_pool} devices cannot hold one {tp}-way generation instance")
    if not two and req.mode != "colocated" and n_gen_pool < tp + 1:
        raise ValueError(f"clusters[0].count: one cluster needs tp + 1 = {tp + 1} devices for sync/async")
    base = SimConfig(
        model=shape, gen_device=gen_dev, train_device=train_dev, gen_devices=tp, train_devices=1, tp=tp,
        lengths=_lengths(req), mode="sync", prompts_per_iteration=req.prompts_per_iteration,
        group_size=req.group_size, prompt_tokens=req.prompt_tokens, dispatch=req.dispatch, alpha=req.alpha,
        max_batch_size=req.max_batch_size, algorithm=req.algorithm, mfu=req.mfu, iterations=req.iterations,
        elastic=req.elastic, length_growth=req.length_growth,
        ptl=PTLProfile(tuple(req.ptl_profile)) if req.ptl_profile else None,
        train=TrainCost(req.train_seconds_per_token) if req.train_seconds_per_token else None, seed=req.seed,
    )
    profiles = build_profiles(base, n_gen_pool)
    alloc: Allocation | None = None
    if two:
        alloc = plan_two_clusters(profiles, n_gen_pool, req.clusters[1].count, tp, gen_dev, train_dev)
    elif n_gen_pool >= tp + 1:
        alloc = plan_one_cluster(profiles, n_gen_pool, tp, gen_dev)

    per_mode: dict[str, PredictionPublic] = {}
    results: dict[str, SimResult] = {}
    if not two:
        colocated_devices = (n_gen_pool // tp) * tp
        results["colocated"] = simulate(replace(base, mode="colocated", gen_devices=colocated_devices))
        per_mode["colocated"] = _prediction(results["colocated"], n_gen_pool * gen_dev.cost_per_hour)
    if alloc is not None:
        for mode in ("sync", "async"):
            spare = n_gen_pool // tp if two else alloc.gen_instances  # one cluster: growing would take trainers
            results[mode] = simulate(replace(base, mode=mode, gen_devices=alloc.gen_devices,
                                             train_devices=alloc.train_devices, elastic_max_instances=spare))
            per_mode[mode] = _prediction(results[mode], alloc.cost_per_hour)
    chosen = results[req.mode]
    if req.mode == "colocated" or alloc is None:
        allocation = AllocationPublic(gen_device=gen_dev.name, gen_devices=chosen.config.gen_devices,
                                      gen_instances=chosen.config.instances, tp=tp, train_device=gen_dev.name,
                                      train_devices=chosen.config.gen_devices, freed_devices=0,
                                      cost_per_hour=n_gen_pool * gen_dev.cost_per_hour)
    else:
        allocation = AllocationPublic(gen_device=gen_dev.name, gen_devices=alloc.gen_devices,
                                      gen_instances=alloc.gen_instances, tp=tp, train_device=train_dev.name,
                                      train_devices=alloc.train_devices, freed_devices=alloc.freed_devices,
                                      cost_per_hour=alloc.cost_per_hour)
    estimate = {"gen_seconds": alloc.gen_seconds, "train_seconds": alloc.train_seconds,
                "iteration_seconds": alloc.iteration_seconds} if alloc else {}
    return PlanPublic(
        model=shape.to_dict(), allocation=allocation, estimate=estimate, predicted=per_mode[req.mode],
        per_mode=per_mode,
        timeline=[SpanPublic(**s.to_dict()) for s in chosen.spans if _keep_lane(s.lane, req.timeline_lanes)],
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
