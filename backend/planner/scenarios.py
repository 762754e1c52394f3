"""The paper's reference experiments as simulator presets (used by tests and bench/planner.py).

- `ablation_72b`: Qwen2.5-72B-like model, 64 H800s, outputs up to 20K tokens. Steps: colocated (random dispatch)
  1.00, + skew-aware dispatch 1.08, + disaggregation + stream generation (sync) 1.23, + async 1.48.
- `allocation_32b`: 32B on 64 H800s with throughput-bound generation: Algorithm 1 moves an even 32/32 split to
  about 40 generation / 24 training devices at about 0.8x the iteration time.
Free parameters (length distribution, MFU, memory the colocated engine may use) are chosen once, documented here,
and shared by every step of an experiment; nothing is tuned per step. Speedups are averaged over three seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from backend.planner.allocation import Allocation, build_profiles, plan_one_cluster
from backend.planner.devices import DEFAULT_DEVICES, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.simulator import SimConfig, SimResult, simulate

ABLATION_STEPS = ("colocated", "+skew_aware", "+disaggregation+streaming", "+async")
PAPER_ABLATION = (1.00, 1.08, 1.23, 1.48)


def ablation_72b_config(iterations: int = 4, seed: int = 0) -> SimConfig:
    return SimConfig(
        model=model_shape("72B"), gen_device=DEFAULT_DEVICES["H800"], gen_devices=64, tp=8, mode="colocated",
        lengths=LengthDistribution(max_tokens=20_000, median=800, sigma=0.9),
        prompts_per_iteration=512, group_size=8, algorithm="grpo", mfu=0.4, colocated_memory_fraction=0.4,
        iterations=iterations, seed=seed,
    )


def best_disaggregated(cfg: SimConfig, n_devices: int) -> SimResult:
    """Simulate every generation/training split of n_devices (generation in multiples of tp); keep the fastest."""
    results = [simulate(replace(cfg, gen_devices=x, train_devices=n_devices - x))
               for x in range(cfg.tp, n_devices, cfg.tp)]
    return min(results, key=lambda r: r.iteration_seconds)


@dataclass(frozen=True)
class AblationRow:
    step: str
    iteration_seconds: float
    speedup: float  # vs colocated
    gen_devices: int
    train_devices: int


def _ablation_once(base: SimConfig) -> list[SimResult]:
    n = base.gen_devices
    half = replace(base, gen_devices=n // 2, train_devices=n - n // 2, dispatch="skew_aware")
    return [
        simulate(replace(base, mode="colocated", dispatch="random")),
        simulate(replace(base, mode="colocated", dispatch="skew_aware")),
        best_disaggregated(replace(half, mode="sync"), n),
        best_disaggregated(replace(half, mode="async"), n),
    ]


def run_ablation(base: SimConfig | None = None, seeds: tuple[int, ...] = (0, 1, 2)) -> list[AblationRow]:
    """Each step's speedup over colocated, averaged over `seeds` (one seed's long tail is noisy)."""
    base = base or ablation_72b_config()
    per_seed = [_ablation_once(replace(base, seed=seed)) for seed in seeds]
    rows = []
    for k, step in enumerate(ABLATION_STEPS):
        speedups = [r[0].iteration_seconds / r[k].iteration_seconds for r in per_seed]
        c = per_seed[0][k].config
        rows.append(AblationRow(
            step, sum(r[k].iteration_seconds for r in per_seed) / len(seeds), sum(speedups) / len(seeds),
            c.gen_devices, c.train_devices if c.mode != "colocated" else c.gen_devices,
        ))
    return rows


def allocation_32b_config(seed: int = 0) -> SimConfig:
    return SimConfig(
        model=model_shape("32B"), gen_device=DEFAULT_DEVICES["H800"], gen_devices=32, train_devices=32, tp=8,
        mode="sync", lengths=LengthDistribution(max_tokens=8_000, median=1_500, sigma=0.5),
        prompts_per_iteration=1024, group_size=8, max_batch_size=48, algorithm="grpo", mfu=0.5,
        dispatch="skew_aware", iterations=3, seed=seed,
    )


def run_allocation_shift(cfg: SimConfig | None = None, n_devices: int = 64) -> tuple[Allocation, Allocation]:
    """(even split, Algorithm 1's choice) for one cluster of n_devices."""
    cfg = cfg or allocation_32b_config()
    profiles = build_profiles(cfg, n_devices)
    half = (n_devices // 2 // cfg.tp) * cfg.tp
    even = Allocation(half, n_devices - half, cfg.tp, profiles.gen(half), profiles.train(n_devices - half),
                      profiles.samples, cost_per_hour=n_devices * cfg.gen_device.cost_per_hour)
    return even, plan_one_cluster(profiles, n_devices, cfg.tp, cfg.gen_device)
