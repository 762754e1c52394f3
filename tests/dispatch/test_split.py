"""Algorithm-2 split on constructed cases, PTL interpolation, and exactly-once dispatch for every policy."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.skew import PTLProfile, random_split, round_robin_split, skew_aware_split

# per-token latency grows with batch size (as on real accelerators: small batches decode faster per token)
PTL = PTLProfile(((1, 0.010), (8, 0.012), (32, 0.020), (128, 0.050)))
GPU_LIKE_PTL = PTLProfile(((1, 0.010), (8, 0.0105), (32, 0.014), (128, 0.040)))  # flat while memory-bound


def test_ptl_interpolates_clamps_and_extrapolates():
    assert PTL(1) == 0.010 and PTL(0) == 0.010
    assert PTL(20) == pytest.approx(0.016)
    assert PTL(256) == pytest.approx(0.050 + (0.050 - 0.020) / 96 * 128)
    assert PTLProfile(((4, 0.5),))(100) == 0.5
    assert PTLProfile(((8, 0.5), (1, 0.1))).points == ((1, 0.1), (8, 0.5))  # sorted on construction


@pytest.mark.parametrize("points", [(), ((0, 0.1),), ((1, 0.1), (1, 0.2)), ((1, -0.1),), ((1, float("nan")),)])
def test_ptl_rejects_bad_points(points):
    with pytest.raises(ValueError, match="PTLProfile"):
        PTLProfile(points)


def test_equal_lengths_get_no_long_tail_instances():
    plan = skew_aware_split([50.0] * 64, 4, PTL, recent_lengths=[50.0] * 200, max_batch_size=32)
    assert plan.n_long_instances == 0
    assert not any(a.long_tail for a in plan.assignments)
    assert sorted(len(a.prompt_indices) for a in plan.assignments) == [16, 16, 16, 16]


def test_heavy_tail_gets_a_few_long_tail_instances_with_small_batches():
    # the top 20% of prompts are 3x longer: ~40% of the work, so a minority of instances serves the tail
    lengths = [120.0] * 103 + [40.0] * 409
    plan = skew_aware_split(lengths, 8, GPU_LIKE_PTL, recent_lengths=lengths, max_batch_size=64)
    long_ = [a for a in plan.assignments if a.long_tail]
    regular = [a for a in plan.assignments if not a.long_tail]
    assert 1 <= plan.n_long_instances <= 3 and len(long_) == plan.n_long_instances
    assert max(a.batch_size for a in long_) < min(a.batch_size for a in regular)
    assert {i for a in long_ for i in a.prompt_indices} == set(range(103))  # the predicted top 20%
    assert plan.est_makespan == max(a.est_latency for a in plan.assignments)


def test_pareto_tail_is_isolated_on_small_batches():
    rng = np.random.default_rng(0)
    lengths = list(np.round(8 * (1 + rng.pareto(1.1, 128))))
    plan = skew_aware_split(lengths, 8, PTL, recent_lengths=lengths, max_batch_size=32)
    long_ = [a for a in plan.assignments if a.long_tail]
    regular = [a for a in plan.assignments if not a.long_tail]
    assert long_ and regular and max(a.batch_size for a in long_) < min(a.batch_size for a in regular)
    tail = set(sorted(range(128), key=lambda i: -lengths[i])[: math.ceil(0.2 * 128)])
    assert {i for a in long_ for i in a.prompt_indices} == tail


def test_skew_aware_beats_mixing_on_its_own_estimate():
    lengths = [500.0] * 10 + [20.0] * 90
    plan = skew_aware_split(lengths, 4, PTL, recent_lengths=lengths, max_batch_size=32, alpha=0.1)
    mixed_bs = 25  # every instance mixed: 25 prompts, each holding a 500-token prompt in its only wave
    assert plan.n_long_instances >= 1 and plan.est_makespan < PTL(mixed_bs) * 500


def test_lpt_order_inside_instances():
    lengths = [3.0, 9.0, 1.0, 7.0, 5.0, 2.0, 8.0, 4.0]
    plan = skew_aware_split(lengths, 2, PTL, recent_lengths=[], max_batch_size=2)
    for a in plan.assignments:
        assert [lengths[i] for i in a.prompt_indices] == sorted((lengths[i] for i in a.prompt_indices), reverse=True)


def test_single_instance_and_more_instances_than_prompts():
    plan = skew_aware_split([1.0, 50.0, 3.0], 1, PTL, recent_lengths=[], max_batch_size=4)
    assert plan.assignments[0].prompt_indices == [1, 2, 0] and plan.n_long_instances == 0
    plan = skew_aware_split([1.0, 2.0], 5, PTL, recent_lengths=[], max_batch_size=4)
    assert len(plan.assignments) == 5 and sorted(p for a in plan.assignments for p in a.prompt_indices) == [0, 1]
    assert skew_aware_split([], 3, PTL, recent_lengths=[], max_batch_size=4).est_makespan == 0.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"n_instances": 0}, "n_instances"), ({"max_batch_size": 0}, "max_batch_size"), ({"alpha": 1.0}, "alpha")],
)
def test_bad_arguments_are_named(kwargs, fragment):
    args = {"n_instances": 2, "max_batch_size": 4, "alpha": 0.2, **kwargs}
    with pytest.raises(ValueError, match=fragment):
        skew_aware_split([1.0, 2.0], args["n_instances"], PTL, recent_lengths=[], max_batch_size=args["max_batch_size"],
                         alpha=args["alpha"])


def test_random_and_round_robin_are_fifo_and_balanced():
    plan = round_robin_split(7, 3, max_batch_size=2)
    assert [a.prompt_indices for a in plan.assignments] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [a.batch_size for a in plan.assignments] == [2, 2, 2]
    plan = random_split(10, 3, seed=1, max_batch_size=8)
    assert sorted(len(a.prompt_indices) for a in plan.assignments) == [3, 3, 4]
    assert all(a.prompt_indices == sorted(a.prompt_indices) for a in plan.assignments)
    assert random_split(10, 3, seed=1, max_batch_size=8) == plan


lengths_strategy = st.lists(st.floats(min_value=0, max_value=5000, allow_nan=False), min_size=0, max_size=80)


@settings(max_examples=150, deadline=None)
@given(
    predicted=lengths_strategy,
    recent=lengths_strategy,
    n_instances=st.integers(1, 12),
    max_bs=st.integers(1, 64),
    alpha=st.floats(0.01, 0.99),
    seed=st.integers(0, 10_000),
)
def test_every_prompt_dispatched_exactly_once(predicted, recent, n_instances, max_bs, alpha, seed):
    n = len(predicted)
    plans = [
        skew_aware_split(predicted, n_instances, PTL, recent_lengths=recent, alpha=alpha, max_batch_size=max_bs),
        random_split(n, n_instances, seed=seed, max_batch_size=max_bs),
        round_robin_split(n, n_instances, max_batch_size=max_bs),
    ]
    for plan in plans:
        assert [a.instance for a in plan.assignments] == list(range(n_instances))
        assert sorted(i for a in plan.assignments for i in a.prompt_indices) == list(range(n))
        assert all(a.batch_size == min(max_bs, len(a.prompt_indices)) for a in plan.assignments)
        assert plan.n_long_instances == sum(a.long_tail for a in plan.assignments) < max(n_instances, 2)
        counts = [len(a.prompt_indices) for a in plan.assignments if not a.long_tail]
        assert not counts or max(counts) - min(counts) <= 1  # a group spreads its prompts evenly
