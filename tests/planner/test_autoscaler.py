"""Autoscaler policy: grows when generation-bound, shrinks when training-bound, hysteresis, cooldown, bounds."""

from __future__ import annotations

from backend.planner.autoscaler import IterationRecord, ScalingBounds, decide

BOUNDS = ScalingBounds(min_instances=1, max_instances=8)


def records(gen: float, train: float, instances: int, n: int = 3) -> list[IterationRecord]:
    return [IterationRecord(gen_seconds=gen, train_seconds=train, instances=instances) for _ in range(n)]


def test_scales_up_when_generation_bound() -> None:
    d = decide(records(100, 50, 2), current=2, bounds=BOUNDS, now=1000.0)
    assert d.action == "up" and d.target > 2
    assert d.numbers["delta"] == 50 and d.numbers["save_up"] == 100 / 3
    assert "generation-bound" in d.reason


def test_step_keeps_generation_no_faster_than_training() -> None:
    d = decide(records(100, 50, 2), current=2, bounds=BOUNDS, now=1000.0)
    assert 100 * 2 / d.target >= 50  # T_gen(target) still >= T_train: no instance wasted


def test_no_change_when_gain_below_one_instance() -> None:
    # delta 10 < 100/5 = 20 saved by a fifth instance: adding one would overshoot
    d = decide(records(100, 90, 4), current=4, bounds=BOUNDS, now=1000.0)
    assert d.action == "hold" and d.target == 4 and d.reason == "balanced"


def test_scales_down_when_training_bound() -> None:
    d = decide(records(30, 100, 4), current=4, bounds=BOUNDS, now=1000.0)
    assert d.action == "down" and 1 <= d.target < 4
    assert 30 * 4 / d.target <= 100  # generation still no slower than training after the step
    assert "training-bound" in d.reason


def test_hysteresis_needs_consecutive_agreeing_iterations() -> None:
    mixed = records(100, 50, 2, n=2) + records(50, 50, 2, n=1)
    assert decide(mixed, current=2, bounds=BOUNDS, now=1000.0).action == "hold"
    too_few = records(100, 50, 2, n=2)
    d = decide(too_few, current=2, bounds=BOUNDS, now=1000.0)
    assert d.action == "hold" and "waiting for 3 iterations" in d.reason
    # iterations measured at another instance count do not count
    stale = records(100, 50, 1, n=3)
    assert decide(stale, current=2, bounds=BOUNDS, now=1000.0).action == "hold"


def test_cooldown_blocks_changes() -> None:
    d = decide(records(100, 50, 2), current=2, bounds=BOUNDS, now=1000.0, last_change_at=990.0, cooldown_s=30)
    assert d.action == "hold" and "cooldown" in d.reason and d.numbers["cooldown_left_s"] == 20
    after = decide(records(100, 50, 2), current=2, bounds=BOUNDS, now=1021.0, last_change_at=990.0, cooldown_s=30)
    assert after.action == "up"


def test_bounds_and_quota() -> None:
    at_max = decide(records(100, 10, 8), current=8, bounds=BOUNDS, now=0.0)
    assert at_max.action == "hold" and at_max.target == 8 and "upper bound" in at_max.reason
    quota = ScalingBounds(min_instances=1, max_instances=8, quota=3)
    capped = decide(records(100, 10, 2), current=2, bounds=quota, now=0.0)
    assert capped.target == 3
    over = decide([], current=5, bounds=quota, now=0.0)
    assert over.target == 3 and over.action == "down" and "team quota" in over.reason
    at_min = decide(records(10, 100, 2), current=2, bounds=ScalingBounds(min_instances=2, max_instances=8), now=0.0)
    assert at_min.action == "hold" and at_min.target == 2
    below = decide([], current=1, bounds=ScalingBounds(min_instances=2, max_instances=8), now=0.0)
    assert below.target == 2 and below.action == "up"


def test_max_step_limits_jumps() -> None:
    d = decide(records(1000, 10, 1), current=1, bounds=ScalingBounds(1, 64), now=0.0, max_step=2)
    assert d.target == 3


def test_quota_never_starves_a_job_below_min_instances() -> None:
    exhausted = ScalingBounds(min_instances=1, max_instances=8, quota=0)
    d = decide([], current=3, bounds=exhausted, now=0.0)
    assert d.target == 1 and d.action == "down"
