"""`shared_jobs`: LoRA jobs sharing generation instances decode in one batch and split the instances' cost."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from backend.planner.allocation import job_cost_per_hour
from backend.planner.devices import DEFAULT_DEVICES, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.schemas import PlanPublic, PlanRequest
from backend.planner.service import make_plan
from backend.planner.sim_generation import scaled_profile
from backend.planner.simulator import SimConfig, job_generation
from contract.skew import PTLProfile

H800, H20 = DEFAULT_DEVICES["H800"], DEFAULT_DEVICES["H20"]
ROOFLINE = {"model_size": "7B", "clusters": [{"device": "H800", "count": 16}], "prompts_per_iteration": 64,
            "group_size": 8, "lengths": {"median": 1000, "max_tokens": 8000}}


def _figures(plan: PlanPublic) -> dict[str, Any]:
    figures = plan.model_dump()
    figures.pop("plan_seconds")
    return figures


@pytest.fixture(scope="module")
def roofline_plans() -> tuple[PlanPublic, PlanPublic]:
    return make_plan(PlanRequest(**ROOFLINE, mode="async")), make_plan(PlanRequest(**ROOFLINE, mode="async",
                                                                                   shared_jobs=4))


def test_sharing_is_slower_per_job_but_cheaper_and_more_per_cost(roofline_plans: tuple[PlanPublic, PlanPublic]) -> None:
    """Decode is memory-bound on the roofline: a 4x bigger batch costs far less than 4x per step, so the job
    generates more slowly but pays a quarter of its generation devices and gets more samples/s per cost."""
    alone, shared = roofline_plans
    assert shared.allocation.cost_per_hour < alone.allocation.cost_per_hour
    for mode in ("sync", "async"):
        one, four = alone.per_mode[mode], shared.per_mode[mode]
        assert (one.shared_jobs, four.shared_jobs) == (1, 4)
        assert four.gen_seconds > one.gen_seconds * 1.2, mode
        assert four.throughput_per_cost > one.throughput_per_cost * 1.05, mode
        assert four.throughput_per_cost == pytest.approx(four.samples_per_s / shared.allocation.cost_per_hour)
    a = shared.allocation
    assert a.cost_per_hour == pytest.approx((a.gen_devices / 4 + a.train_devices) * H800.cost_per_hour)
    assert alone.allocation.cost_per_hour == pytest.approx(16 * H800.cost_per_hour)
    # colocated generates in the trainer's process: simulated unshared, at the whole pool's price, either way
    assert shared.per_mode["colocated"] == alone.per_mode["colocated"]
    assert shared.per_mode["colocated"].shared_jobs == 1


def test_two_clusters_split_only_the_generation_devices() -> None:
    body = {"model_size": "7B", "mode": "sync", "prompts_per_iteration": 32, "group_size": 4,
            "lengths": {"median": 600, "max_tokens": 4000},
            "clusters": [{"device": "H20", "count": 8}, {"device": "H800", "count": 4}]}
    plan = make_plan(PlanRequest(**body, shared_jobs=3))
    a = plan.allocation
    assert a.cost_per_hour == pytest.approx(a.gen_devices * H20.cost_per_hour / 3 +
                                            a.train_devices * H800.cost_per_hour)
    assert plan.predicted.throughput_per_cost == pytest.approx(plan.predicted.samples_per_s / a.cost_per_hour)
    assert job_cost_per_hour(8, H20, 4, H800, 1) == pytest.approx(8 * H20.cost_per_hour + 4 * H800.cost_per_hour)


@pytest.mark.parametrize("body", [
    ROOFLINE,
    {"model_size": "14B", "mode": "async", "prompts_per_iteration": 32,
     "clusters": [{"device": "H20", "count": 8}, {"device": "H800", "count": 4}]},
])
def test_one_shared_job_is_exactly_the_unshared_plan(body: dict[str, Any]) -> None:
    without = make_plan(PlanRequest(**body))
    assert _figures(make_plan(PlanRequest(**body, shared_jobs=1))) == _figures(without)
    assert PlanRequest(**body).shared_jobs == 1
    # the cost of one job's devices is the whole allocation's, as before sharing existed
    a = without.allocation
    gen_price = DEFAULT_DEVICES[a.gen_device].cost_per_hour
    assert a.cost_per_hour == pytest.approx(a.gen_devices * gen_price + a.train_devices *
                                            DEFAULT_DEVICES[a.train_device].cost_per_hour)


# PTL(b) = 0.009 + 0.001 b (linear: the scaled profile is exact); every response is 10 tokens; one instance
LINEAR = [(1, 0.010), (1024, 0.009 + 0.001 * 1024)]
TINY = {"model_size": "7B", "clusters": [{"device": "H800", "count": 2}], "tp": 1, "mode": "sync",
        "prompts_per_iteration": 16, "group_size": 2, "ptl_profile": LINEAR, "max_batch_size": 64,
        "train_seconds_per_token": 1e-9, "lengths": {"kind": "empirical", "values": [10], "max_tokens": 10}}


def ptl(batch: int) -> float:
    return 0.009 + 0.001 * batch


def test_a_measured_profile_is_scaled_by_the_jobs_sharing_the_batch() -> None:
    # alone: 64 slots hold all 32 samples: 10 steps of 32 rows
    alone = make_plan(PlanRequest(**TINY))
    assert alone.allocation.gen_instances == 1
    assert alone.predicted.gen_seconds == pytest.approx(10 * ptl(32))
    # 4 jobs: this one gets 64 // 4 = 16 slots, so two waves of 16 of its rows, each step a step of 16 * 4 rows
    shared = make_plan(PlanRequest(**TINY, shared_jobs=4))
    assert shared.predicted.gen_seconds == pytest.approx(2 * 10 * ptl(64))
    assert shared.estimate["gen_seconds"] == pytest.approx(2 * 10 * ptl(64))  # Algorithm 1's profile agrees
    # 32 jobs: two slots, one prompt of 2 samples at a time: 16 waves, each step a step of 2 * 32 rows
    crowded = make_plan(PlanRequest(**TINY, shared_jobs=32))
    assert crowded.predicted.gen_seconds == pytest.approx(16 * 10 * ptl(64))


def test_job_generation_scales_the_profile_and_splits_the_slots() -> None:
    measured = PTLProfile(tuple(LINEAR))
    cfg = SimConfig(model=model_shape("7B"), gen_device=H800, gen_devices=1, train_devices=1, ptl=measured,
                    max_batch_size=10, lengths=LengthDistribution(max_tokens=10), shared_jobs=3)
    profile, cap = job_generation(cfg, context=100.0, memory_fraction=0.9)
    assert cap == 3  # 10 // 3
    assert [profile(b) for b in (1, 2, 3)] == pytest.approx([ptl(3), ptl(6), ptl(9)])
    assert job_generation(replace(cfg, max_batch_size=2), 100.0, 0.9)[1] == 1  # at least one slot
    alone_profile, alone_cap = job_generation(replace(cfg, shared_jobs=1), 100.0, 0.9)
    assert (alone_profile, alone_cap) == (measured, 10)
    assert scaled_profile(measured, 2)(5) == pytest.approx(ptl(10))


def test_colocated_never_shares() -> None:
    with pytest.raises(ValueError, match="shared_jobs: mode 'colocated'"):
        PlanRequest(mode="colocated", shared_jobs=2)
    with pytest.raises(ValueError, match="shared_jobs: mode 'colocated'"):
        make_plan(PlanRequest(mode="colocated", shared_jobs=2))
    # a request copied without validation is refused by make_plan itself
    shared = PlanRequest(shared_jobs=2, clusters=[{"device": "H800", "count": 4}])
    with pytest.raises(ValueError, match="shared_jobs: mode 'colocated'"):
        make_plan(shared.model_copy(update={"mode": "colocated"}))
    with pytest.raises(ValueError, match="shared_jobs"):
        SimConfig(model=model_shape("7B"), gen_device=H800, gen_devices=1, mode="colocated",
                  lengths=LengthDistribution(max_tokens=10), shared_jobs=2)
    for bad in (0, 65):
        with pytest.raises(ValueError, match="shared_jobs"):
            PlanRequest(shared_jobs=bad)
    assert make_plan(PlanRequest(mode="colocated", shared_jobs=1, prompts_per_iteration=8,
                                 clusters=[{"device": "H800", "count": 2}])).predicted.shared_jobs == 1
