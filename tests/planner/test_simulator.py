"""Simulator: the paper's 72B ablation and 32B allocation shift, per-instance maths, modes, timeline, elastic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from backend.planner.devices import DEFAULT_DEVICES, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.scenarios import PAPER_ABLATION, allocation_32b_config, run_ablation, run_allocation_shift
from backend.planner.sim_generation import Dispatch, run_instance, simulate_generation
from backend.planner.simulator import SimConfig, simulate
from contract.skew import PTLProfile

FLAT = PTLProfile(((1, 0.01), (1024, 0.01)))


@pytest.fixture(scope="module")
def ablation() -> list:
    return run_ablation()


def test_ablation_72b_matches_paper_within_15_percent(ablation: list) -> None:
    speedups = [row.speedup for row in ablation]
    for got, paper in zip(speedups, PAPER_ABLATION, strict=True):
        assert got == pytest.approx(paper, rel=0.15)
    assert speedups == sorted(speedups)  # every step helps


def test_allocation_shift_32b_on_64_devices() -> None:
    even, planned = run_allocation_shift()
    assert (even.gen_devices, even.train_devices) == (32, 32)
    assert 36 <= planned.gen_devices <= 44 and planned.gen_devices + planned.train_devices == 64
    assert planned.iteration_seconds / even.iteration_seconds == pytest.approx(0.8, rel=0.15)


def test_run_instance_continuous_batching_maths() -> None:
    assert run_instance(np.array([5]), 4, FLAT).tolist() == pytest.approx([0.05])
    # cap 1: sequential; the second starts when the first ends
    assert run_instance(np.array([3, 2]), 1, FLAT).tolist() == pytest.approx([0.03, 0.05])
    # cap 2 with backfill: the third starts when the shortest finishes
    assert run_instance(np.array([4, 1, 2]), 2, FLAT).tolist() == pytest.approx([0.04, 0.01, 0.03])
    linear = PTLProfile(((1, 0.01), (2, 0.02)))
    assert run_instance(np.array([2, 1]), 2, linear).tolist() == pytest.approx([0.03, 0.02])


def small_config(**overrides: object) -> SimConfig:
    base = SimConfig(model=model_shape("7B"), gen_device=DEFAULT_DEVICES["H800"], gen_devices=4, train_devices=4,
                     lengths=LengthDistribution(max_tokens=4000, median=500, sigma=1.0), prompts_per_iteration=64,
                     group_size=4, iterations=3, mode="sync")
    return replace(base, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["colocated", "sync", "async"])
def test_modes_produce_consistent_stats_and_timeline(mode: str) -> None:
    result = simulate(small_config(mode=mode, gen_devices=8 if mode == "colocated" else 4))
    assert len(result.iterations) == 3
    for it in result.iterations:
        assert it.gen_end >= it.gen_start and it.train_end >= it.gen_start
        assert it.samples == 64 * 4 and it.iteration_seconds > 0
    lanes = {s.lane for s in result.spans}
    assert "trainer" in lanes and "gen-0" in lanes
    assert {s.kind for s in result.spans} <= {"generating", "loading_weights", "idle", "training", "waiting"}
    for lane in lanes:
        spans = [s for s in result.spans if s.lane == lane]
        assert all(s.end > s.start for s in spans)
        assert all(a.end <= b.start + 1e-6 for a, b in zip(spans, spans[1:], strict=False)), lane
    assert 0 <= result.gen_bubble_fraction <= 1 and 0 <= result.train_bubble_fraction <= 1


def test_async_is_never_slower_than_sync() -> None:
    sync, asynchronous = simulate(small_config(mode="sync")), simulate(small_config(mode="async"))
    assert asynchronous.iteration_seconds <= sync.iteration_seconds * 1.001


def test_measured_profiles_replace_the_roofline() -> None:
    slow = simulate(small_config(ptl=PTLProfile(((1, 1.0), (1024, 1.0)))))
    fast = simulate(small_config(ptl=PTLProfile(((1, 0.001), (1024, 0.001)))))
    assert slow.summary()["gen_seconds"] > 100 * fast.summary()["gen_seconds"]


def test_empirical_lengths() -> None:
    lengths = LengthDistribution.empirical([100, 200, 3000])
    groups = lengths.sample_group_lengths(50, 2, np.random.default_rng(0))
    assert set(groups.lengths.reshape(-1).tolist()) <= {100, 200, 3000}
    with pytest.raises(ValueError, match="non-empty"):
        LengthDistribution.empirical([])


def test_elastic_adds_instances_when_generation_bound() -> None:
    cfg = small_config(gen_devices=1, train_devices=8, iterations=5, elastic=True, elastic_max_instances=6)
    result = simulate(cfg)
    counts = [it.instances for it in result.iterations]
    assert counts[0] == 1 and counts[-1] > 1
    assert counts == sorted(counts)
    static = simulate(replace(cfg, elastic=False))
    assert result.iterations[-1].gen_seconds < static.iterations[-1].gen_seconds


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="train_devices"):
        small_config(train_devices=0)
    with pytest.raises(ValueError, match="tp=2"):
        small_config(tp=2, gen_devices=1)


def test_allocation_config_is_deterministic() -> None:
    cfg = allocation_32b_config()
    assert run_allocation_shift(cfg)[1] == run_allocation_shift(cfg)[1]


@pytest.mark.parametrize("dispatch", ["random", "round_robin", "skew_aware"])
def test_many_instances_dispatch_every_sample_once(dispatch: Dispatch) -> None:
    lengths = LengthDistribution(max_tokens=2000, median=300, sigma=1.0)
    groups = lengths.sample_group_lengths(500, 2, np.random.default_rng(1))
    runs = simulate_generation(groups, 300, PTLProfile(((1, 0.01), (64, 0.02))), max_batch_size=8,
                               dispatch=dispatch, alpha=0.2, recent_lengths=groups.flat, seed=3)
    assert sorted(r.instance for r in runs) == list(range(300))
    ids = np.concatenate([r.sample_ids for r in runs])
    assert sorted(ids.tolist()) == list(range(1000))
    idle = simulate_generation(groups, 600, PTLProfile(((1, 0.01),)), max_batch_size=8, dispatch=dispatch,
                               alpha=0.2, recent_lengths=groups.flat, seed=3)
    assert len(idle) == 600 and sum(len(r.sample_ids) == 0 for r in idle) == 100  # one prompt per busy instance


def test_elastic_follows_growing_responses() -> None:
    cfg = small_config(gen_devices=2, train_devices=6, iterations=6, length_growth=0.3, elastic=True,
                       elastic_max_instances=8)
    grown = simulate(cfg)
    counts = [it.instances for it in grown.iterations]
    assert counts[-1] > counts[0]
    static = simulate(replace(cfg, elastic=False))
    assert static.iterations[-1].tokens > static.iterations[0].tokens  # responses really grew
    assert grown.iterations[-1].gen_seconds < static.iterations[-1].gen_seconds


def test_round_robin_deals_prompt_i_to_instance_i_mod_n_in_order() -> None:
    lengths = LengthDistribution(max_tokens=2000, median=300, sigma=1.0)
    groups = lengths.sample_group_lengths(7, 2, np.random.default_rng(0))
    runs = simulate_generation(groups, 3, FLAT, max_batch_size=8, dispatch="round_robin", alpha=0.2,
                               recent_lengths=groups.flat, seed=0)
    by_instance = {r.instance: r.sample_ids.tolist() for r in runs}
    # group size 2: prompt p owns samples 2p and 2p + 1; instance k admits prompts k, k + 3, ... FIFO
    assert by_instance == {0: [0, 1, 6, 7, 12, 13], 1: [2, 3, 8, 9], 2: [4, 5, 10, 11]}
    assert not any(r.long_tail for r in runs)
    with pytest.raises(ValueError, match="unknown dispatch policy 'lpt'.*random.*round_robin.*skew_aware"):
        simulate_generation(groups, 3, FLAT, max_batch_size=8, dispatch="lpt", alpha=0.2,  # type: ignore[arg-type]
                            recent_lengths=groups.flat, seed=0)


@pytest.mark.parametrize("staleness", [1, 2, 3])
def test_async_generation_waits_for_weights_at_most_max_staleness_old(staleness: int) -> None:
    """Generation of iteration i needs the weights of step i - 1 - k; training-bound, it runs exactly that far ahead."""
    cfg = small_config(mode="async", max_staleness=staleness, iterations=7, gen_devices=8, train_devices=1)
    its = simulate(cfg).iterations
    for i, it in enumerate(its):
        needed = i - 1 - staleness
        if needed >= 0:
            assert it.gen_start >= its[needed].train_end
    ahead = [sum(other.gen_start < it.train_end for other in its[i + 1:]) for i, it in enumerate(its[:-staleness])]
    assert max(ahead) == staleness  # generations started before step i ends: never more than k, and k is reached


def test_larger_max_staleness_lets_generation_run_further_ahead() -> None:
    starts = {k: [it.gen_start for it in simulate(small_config(mode="async", max_staleness=k, iterations=6,
                                                                gen_devices=8, train_devices=1)).iterations]
              for k in (1, 3)}
    assert all(s3 <= s1 + 1e-9 for s1, s3 in zip(starts[1], starts[3], strict=True))
    assert starts[3][3] < starts[1][3]  # iteration 3 need not wait for step 1 when k = 3
    sync = simulate(small_config(mode="sync", max_staleness=3, gen_devices=8, train_devices=1))
    assert sync.iterations == simulate(small_config(mode="sync", gen_devices=8, train_devices=1)).iterations
