"""make_plan end to end (no server) and the device-catalog overrides file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import get_args

import pytest

from backend.planner import catalog_store
from backend.planner.costmodel import TRAIN_FLOPS_PER_PARAM
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec
from backend.planner.schemas import PlanPublic, PlanRequest
from backend.planner.service import make_plan
from contract.catalog import DispatchPolicy
from contract.spec import AlgorithmName, JobSpec, Mode


def test_one_cluster_plan_has_every_mode_and_a_timeline() -> None:
    plan = make_plan(PlanRequest(model_size="7B", clusters=[{"device": "H800", "count": 8}],
                                 prompts_per_iteration=32, group_size=4))
    a = plan.allocation
    assert a.gen_devices + a.train_devices == 8 and a.gen_instances == a.gen_devices // a.tp
    assert set(plan.per_mode) == {"colocated", "sync", "async"}
    assert plan.predicted.mode == "sync" and plan.predicted.samples_per_s > 0
    assert plan.predicted.throughput_per_cost == pytest.approx(plan.predicted.samples_per_s / 8)
    assert plan.timeline and {s.lane for s in plan.timeline} >= {"trainer", "gen-0"}


def test_two_clusters_free_devices_and_report_cost() -> None:
    plan = make_plan(PlanRequest(model_size="14B", mode="async", prompts_per_iteration=64,
                                 clusters=[{"device": "H20", "count": 16}, {"device": "H800", "count": 16}]))
    a = plan.allocation
    assert a.gen_device == "H20" and a.train_device == "H800"
    assert a.gen_devices + a.train_devices + a.freed_devices == 32
    assert a.cost_per_hour == pytest.approx(a.gen_devices * 0.45 + a.train_devices * 1.0)
    assert set(plan.per_mode) == {"sync", "async"}


def test_planner_for_512_devices_is_fast() -> None:
    started = time.perf_counter()
    make_plan(PlanRequest(model_size="72B", clusters=[{"device": "H800", "count": 512}], iterations=2))
    assert time.perf_counter() - started < 10  # bench/planner.py reports the figure; target < 1 s unloaded


def test_bad_inputs_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"clusters\[0\].device: unknown device 'B300'"):
        make_plan(PlanRequest(clusters=[{"device": "B300", "count": 8}]))
    with pytest.raises(ValueError, match="cannot hold one 8-way"):
        make_plan(PlanRequest(model_size="72B", clusters=[{"device": "H800", "count": 4}]))
    with pytest.raises(ValueError, match="do not fit"):
        make_plan(PlanRequest(model_size="72B", tp=1, clusters=[{"device": "H800", "count": 4}]))


def test_measured_profiles_are_used() -> None:
    plan = make_plan(PlanRequest(prompts_per_iteration=16, group_size=2, ptl_profile=[(1, 0.5), (64, 0.5)],
                                 train_seconds_per_token=1e-9, lengths={"max_tokens": 100, "median": 50}))
    assert plan.predicted.gen_seconds > 20  # >= 50 tokens at 0.5 s per token


def test_catalog_overrides_round_trip(tmp_path: Path) -> None:
    assert catalog_store.load_catalog(tmp_path) == DEFAULT_DEVICES
    cheap = DeviceSpec("H800", bf16_tflops=989, mem_bandwidth_tbps=3.35, memory_gb=80, cost_per_hour=0.5)
    catalog_store.save_override(tmp_path, cheap)
    catalog_store.save_override(tmp_path, DeviceSpec("MI300X", 1300, 5.3, 192, 1.1))
    catalog = catalog_store.load_catalog(tmp_path)
    assert catalog["H800"].cost_per_hour == 0.5 and "MI300X" in catalog
    assert catalog_store.delete_override(tmp_path, "H800")
    assert not catalog_store.delete_override(tmp_path, "H800")
    assert catalog_store.load_catalog(tmp_path)["H800"] == DEFAULT_DEVICES["H800"]


def test_heterogeneous_h20_generation_pays_off_per_cost() -> None:
    """Paper: H20 generation + H800 training gives 1.23-1.33x throughput per cost over H800 only."""
    body = {"model_size": "32B", "prompts_per_iteration": 256}
    hetero = make_plan(PlanRequest(**body, clusters=[{"device": "H20", "count": 32}, {"device": "H800", "count": 32}]))
    homo = make_plan(PlanRequest(**body, clusters=[{"device": "H800", "count": 64}]))
    ratio = hetero.predicted.throughput_per_cost / homo.predicted.throughput_per_cost
    assert ratio == pytest.approx(1.28, rel=0.15)


def test_elastic_plan_stays_within_the_generation_cluster() -> None:
    body = {"model_size": "7B", "prompts_per_iteration": 64, "group_size": 4, "iterations": 6, "length_growth": 0.4,
            "clusters": [{"device": "H20", "count": 16}, {"device": "H800", "count": 4}], "timeline_lanes": 256}
    elastic = make_plan(PlanRequest(**body, elastic=True))
    static = make_plan(PlanRequest(**body))
    lanes = {int(s.lane[4:]) for s in elastic.timeline if s.lane.startswith("gen-")}
    assert max(lanes) < 16 and elastic.predicted.samples_per_s > 0
    # training-bound as responses grow: the autoscaler frees generation instances (the static plan keeps all 16
    # generating to the end) at a bounded cost in time
    assert generating_late(static) == 16
    assert generating_late(elastic) < 16
    assert elastic.predicted.iteration_seconds <= static.predicted.iteration_seconds * 1.25


def generating_late(plan: PlanPublic) -> int:
    """Generation lanes that still generate in the last 40% of the simulated run."""
    end = max(span.end for span in plan.timeline)
    return len({s.lane for s in plan.timeline if s.lane.startswith("gen-") and s.kind == "generating"
                and s.start > 0.6 * end})


def test_plan_choices_are_the_jobspecs() -> None:
    """Modes, algorithms and dispatch policies (the OpenAPI enums the dashboard reads) come from `contract.spec`."""
    props = PlanRequest.model_json_schema()["properties"]
    assert props["mode"]["enum"] == list(get_args(Mode))
    assert props["algorithm"]["enum"] == list(get_args(AlgorithmName))
    assert props["dispatch"]["enum"] == list(get_args(DispatchPolicy))
    assert "round_robin" in props["dispatch"]["enum"]
    assert set(TRAIN_FLOPS_PER_PARAM) == set(get_args(AlgorithmName))  # the cost model knows every algorithm
    staleness, job_staleness = props["max_staleness"], JobSpec.model_json_schema()["properties"]["max_staleness"]
    assert (staleness["minimum"], staleness["maximum"], staleness["default"]) == (
        job_staleness["minimum"], job_staleness["maximum"], job_staleness["default"])
    for bad in (0, 65, "x"):
        with pytest.raises(ValueError, match="max_staleness"):
            PlanRequest(max_staleness=bad)


def test_round_robin_plan() -> None:
    request = PlanRequest(model_size="7B", clusters=[{"device": "H800", "count": 8}], prompts_per_iteration=32,
                          group_size=4, dispatch="round_robin")
    plan = make_plan(request)
    assert set(plan.per_mode) == {"colocated", "sync", "async"} and plan.predicted.samples_per_s > 0
    skew = make_plan(request.model_copy(update={"dispatch": "skew_aware"}))
    assert plan.per_mode["sync"] != skew.per_mode["sync"]  # the policy reaches the simulator


def _generation_starts(max_staleness: int) -> list[float]:
    """Training-bound async plan (one generation and one training device, slow measured training)."""
    plan = make_plan(PlanRequest(
        model_size="7B", clusters=[{"device": "H800", "count": 2}], tp=1, mode="async", max_staleness=max_staleness,
        prompts_per_iteration=16, group_size=2, ptl_profile=[(1, 0.001), (64, 0.001)],
        train_seconds_per_token=1e-3, lengths={"max_tokens": 200, "median": 100}, iterations=5,
    ))
    return sorted(s.start for s in plan.timeline if s.lane == "gen-0" and s.kind == "generating")


def test_plan_uses_max_staleness() -> None:
    one, three = _generation_starts(1), _generation_starts(3)
    assert len(one) == len(three) == 5
    first_step_end = one[2]  # k = 1: iteration 2 waits for step 0's weights
    assert sum(start < first_step_end for start in three) == 4  # k = 3: iterations 1-3 start before step 0 ends
    assert sum(start < first_step_end for start in one) == 2


def test_recommended_mode_is_the_fastest_of_the_plans_own_table() -> None:
    """The dashboard's default request (sync on 16 H800s) simulates async fastest: the plan recommends async with
    its own allocation, whatever mode was requested (it used to present the requested, slower mode as the plan)."""
    request = PlanRequest(model_size="7B", clusters=[{"device": "H800", "count": 16}], mode="sync",
                          lengths={"median": 2000, "max_tokens": 20000}, prompts_per_iteration=256, group_size=8)
    plan = make_plan(request)
    fastest = max(plan.per_mode.values(), key=lambda p: p.samples_per_s)
    assert plan.recommended_mode == fastest.mode == "async"
    assert plan.predicted.mode == "sync" and plan.predicted.samples_per_s < fastest.samples_per_s
    assert plan.recommended_allocation.gen_devices + plan.recommended_allocation.train_devices == 16
    colocated = make_plan(request.model_copy(update={"mode": "colocated"}))
    assert colocated.recommended_mode == "async"
    assert colocated.recommended_allocation.train_devices < 16  # the split, not colocated's whole pool
