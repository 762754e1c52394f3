"""Resource allocation (paper Algorithm 1) between generation and training.

Profiles: P_gen(x) is the simulated generation makespan of one iteration on x devices (x / tp instances), measured at
a handful of instance counts and interpolated (the paper's "few profiling runs"); P_train(y) is the training time of
the iteration's tokens on y devices. Both are non-increasing, so for one cluster the best y for a given x is n - x.

- One cluster of n identical devices: enumerate x (multiples of tp) and y = n - x, minimise max(P_gen, P_train).
- Two clusters (generation on cluster A, training on cluster B, possibly different devices): start from the full
  allocation, shrink the faster stage to the k devices minimising |P_fast(k) - T_slow|, free the rest.

Cost per hour: the training devices in full plus the generation devices' share, gen_devices * price / shared_jobs
(LoRA jobs sharing the generation instances split their cost; `job_cost_per_hour`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from backend.planner.costmodel import KV_MEMORY_FRACTION, train_cost
from backend.planner.devices import DeviceSpec
from backend.planner.sim_generation import simulate_generation
from backend.planner.simulator import SimConfig, job_generation, mean_context

PROFILE_POINTS = 12  # simulated instance counts P_gen is interpolated between (all counts when at most this many)


@dataclass(frozen=True)
class Allocation:
    gen_devices: int
    train_devices: int
    tp: int
    gen_seconds: float  # P_gen(gen_devices)
    train_seconds: float  # P_train(train_devices)
    samples_per_iteration: int
    cost_per_hour: float  # relative price of the devices used (this job's share of shared generation devices)
    freed_devices: int = 0

    @property
    def gen_instances(self) -> int:
        return self.gen_devices // self.tp

    @property
    def iteration_seconds(self) -> float:
        return max(self.gen_seconds, self.train_seconds)

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_iteration / self.iteration_seconds

    @property
    def throughput_per_cost(self) -> float:
        return self.samples_per_s / self.cost_per_hour


@dataclass(frozen=True)
class StageProfiles:
    gen: Callable[[int], float]  # devices -> seconds
    train: Callable[[int], float]  # devices -> seconds
    samples: int


def build_profiles(cfg: SimConfig, gen_device_limit: int) -> StageProfiles:
    """P_gen from simulated generation at <= PROFILE_POINTS instance counts, P_train from the training cost model.

    `cfg` supplies model, devices, tp, lengths, batch and dispatch; its device counts are ignored.
    """
    train_dev = cfg.train_device or cfg.gen_device
    context = mean_context(cfg)
    ptl, cap = job_generation(cfg, context, KV_MEMORY_FRACTION)
    cost = cfg.train or train_cost(cfg.model, train_dev, algorithm=cfg.algorithm, context=context, mfu=cfg.mfu)
    rng = np.random.default_rng(cfg.seed)
    recent = cfg.lengths.sample_group_lengths(cfg.prompts_per_iteration, cfg.group_size, rng).flat
    groups = cfg.lengths.sample_group_lengths(cfg.prompts_per_iteration, cfg.group_size, rng)
    tokens = float((groups.lengths + cfg.prompt_tokens).sum())
    max_instances = max(1, min(gen_device_limit // cfg.tp, cfg.prompts_per_iteration))
    if max_instances <= PROFILE_POINTS:
        counts = list(range(1, max_instances + 1))
    else:
        counts = sorted({max(1, round(v)) for v in np.geomspace(1, max_instances, PROFILE_POINTS)})
    measured = []
    for count in counts:
        runs = simulate_generation(groups, count, ptl, max_batch_size=cap, dispatch=cfg.dispatch, alpha=cfg.alpha,
                                   recent_lengths=recent, seed=cfg.seed,
                                   tail_tokens_per_forward=cfg.tail_tokens_per_forward)
        measured.append(max(r.busy_seconds for r in runs))
    xs, ys = np.asarray(counts, dtype=float), np.asarray(measured)

    def gen(devices: int) -> float:
        instances = devices // cfg.tp
        if instances < 1:
            return math.inf
        # beyond one prompt per instance nothing gets faster; interpolate in between
        return float(np.interp(min(instances, max_instances), xs, np.minimum.accumulate(ys)))

    def train(devices: int) -> float:
        return cost.seconds(tokens, devices) if devices >= 1 else math.inf

    return StageProfiles(gen=gen, train=train, samples=groups.lengths.size)


def job_cost_per_hour(
    gen_devices: int, gen_device: DeviceSpec, train_devices: int, train_device: DeviceSpec, shared_jobs: int = 1
) -> float:
    """This job's relative price per hour: its share of the generation devices (split among the `shared_jobs` jobs
    sharing them) plus its training devices in full."""
    if gen_device.cost_per_hour == train_device.cost_per_hour:  # one price: (x / shared_jobs + y) * price
        return (gen_devices / shared_jobs + train_devices) * gen_device.cost_per_hour
    return gen_devices * gen_device.cost_per_hour / shared_jobs + train_devices * train_device.cost_per_hour


def plan_one_cluster(
    profiles: StageProfiles, n_devices: int, tp: int, device: DeviceSpec, *, shared_jobs: int = 1
) -> Allocation:
    """Minimise max(P_gen(x), P_train(n - x)) over x in multiples of tp."""
    if n_devices < tp + 1:
        raise ValueError(f"one cluster needs at least tp + 1 = {tp + 1} devices (generation and training), "
                         f"got {n_devices}")
    best: tuple[float, int] | None = None
    for x in range(tp, n_devices, tp):
        slowest = max(profiles.gen(x), profiles.train(n_devices - x))
        if best is None or slowest < best[0] - 1e-12:
            best = (slowest, x)
    assert best is not None
    x = best[1]
    return Allocation(x, n_devices - x, tp, profiles.gen(x), profiles.train(n_devices - x), profiles.samples,
                      cost_per_hour=job_cost_per_hour(x, device, n_devices - x, device, shared_jobs))


def plan_two_clusters(
    profiles: StageProfiles, gen_devices: int, train_devices: int, tp: int, gen_device: DeviceSpec,
    train_device: DeviceSpec, *, shared_jobs: int = 1,
) -> Allocation:
    """Full allocation, then shrink the faster stage to the k minimising |P_fast(k) - T_slow| and free the rest."""
    if gen_devices < tp or train_devices < 1:
        raise ValueError(f"two clusters need >= tp = {tp} generation devices and >= 1 training device, got "
                         f"{gen_devices} and {train_devices}")
    x = (gen_devices // tp) * tp
    y = train_devices
    t_gen, t_train = profiles.gen(x), profiles.train(y)
    if t_gen < t_train:
        x = min(range(tp, x + 1, tp), key=lambda k: (abs(profiles.gen(k) - t_train), -k))
    elif t_train < t_gen:
        y = min(range(1, y + 1), key=lambda k: (abs(profiles.train(k) - t_gen), -k))
    cost = job_cost_per_hour(x, gen_device, y, train_device, shared_jobs)
    return Allocation(x, y, tp, profiles.gen(x), profiles.train(y), profiles.samples, cost_per_hour=cost,
                      freed_devices=gen_devices + train_devices - x - y)
