"""Planner properties (hypothesis): Algorithm 1 never beats brute force wrongly, respects cluster sizes and tp."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from backend.planner.allocation import StageProfiles, plan_one_cluster, plan_two_clusters
from backend.planner.devices import DEFAULT_DEVICES
from backend.planner.schemas import PlanRequest
from backend.planner.service import suggest_instances
from contract.spec import JobSpec

H800, H20 = DEFAULT_DEVICES["H800"], DEFAULT_DEVICES["H20"]


def profiles(gen_work: float, train_work: float, floor: float, tp: int) -> StageProfiles:
    """Monotone profiles: generation is work / instances but never below a long-tail floor."""

    def gen(devices: int) -> float:
        return math.inf if devices < tp else max(floor, gen_work / (devices // tp))

    def train(devices: int) -> float:
        return math.inf if devices < 1 else train_work / devices

    return StageProfiles(gen=gen, train=train, samples=100)


works = st.floats(min_value=1.0, max_value=1e5)


@settings(max_examples=60, deadline=None)
@given(gen_work=works, train_work=works, floor=st.floats(0, 1e3), tp=st.sampled_from([1, 2, 4, 8]),
       n=st.integers(min_value=2, max_value=512))
def test_one_cluster_is_the_brute_force_optimum(gen_work: float, train_work: float, floor: float, tp: int,
                                                n: int) -> None:
    if n < tp + 1:
        return
    p = profiles(gen_work, train_work, floor, tp)
    alloc = plan_one_cluster(p, n, tp, H800)
    assert alloc.gen_devices % tp == 0 and alloc.gen_devices >= tp and alloc.train_devices >= 1
    assert alloc.gen_devices + alloc.train_devices == n
    brute = min(max(p.gen(x), p.train(y)) for x in range(tp, n, tp) for y in range(1, n - x + 1))
    assert alloc.iteration_seconds <= brute * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(gen_work=works, train_work=works, tp=st.sampled_from([1, 2, 4]), a=st.integers(4, 256),
       b=st.integers(1, 256))
def test_two_clusters_shrink_only_the_faster_stage(gen_work: float, train_work: float, tp: int, a: int,
                                                   b: int) -> None:
    p = profiles(gen_work, train_work, 0.0, tp)
    alloc = plan_two_clusters(p, a, b, tp, H20, H800)
    full_x = (a // tp) * tp
    assert alloc.gen_devices <= full_x and alloc.train_devices <= b and alloc.gen_devices % tp == 0
    assert alloc.gen_devices == full_x or alloc.train_devices == b  # one stage keeps everything
    assert alloc.freed_devices == a + b - alloc.gen_devices - alloc.train_devices
    full = max(p.gen(full_x), p.train(b))
    # shrinking targets the slower stage's time: never worse than the full allocation by more than the last step it
    # shrank by (from k + 1 to k devices: it may stop just past the slow stage's time when that is nearer)
    gen_step = p.gen(alloc.gen_devices) - p.gen(alloc.gen_devices + tp) if alloc.gen_devices < full_x else 0.0
    train_step = p.train(alloc.train_devices) - p.train(alloc.train_devices + 1) if alloc.train_devices < b else 0.0
    step = max(gen_step, train_step, 0.0)
    assert alloc.iteration_seconds <= full + step + 1e-9
    assert alloc.cost_per_hour == alloc.gen_devices * H20.cost_per_hour + alloc.train_devices * H800.cost_per_hour


@settings(max_examples=40, deadline=None)
@given(prompts=st.integers(1, 4096), group=st.integers(1, 64), batch=st.integers(1, 512),
       quota=st.integers(1, 64), auto=st.booleans())
def test_suggest_instances_is_bounded(prompts: int, group: int, batch: int, quota: int, auto: bool) -> None:
    spec = JobSpec.model_validate({
        "model": "m", "dataset": {"builtin": "arithmetic"}, "algorithm": {"group_size": group},
        "training": {"prompts_per_iteration": prompts}, "generation": {"batch_size": batch},
        "autoscale": {"policy": "auto" if auto else "manual", "min_instances": 1, "max_instances": 4},
    })
    n = suggest_instances(spec, quota)
    assert 1 <= n <= quota
    if auto:
        assert n <= 4
    if not auto and prompts * group <= batch:
        assert n == 1


def test_plan_request_rejects_colocated_on_two_clusters() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="colocated"):
        PlanRequest(mode="colocated", clusters=[{"device": "H20", "count": 4}, {"device": "H800", "count": 4}])
