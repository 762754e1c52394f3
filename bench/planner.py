"""Planner benchmark: Algorithm 1's run time on 512 devices and the simulated 72B ablation (paper §7).

Run: `python bench/planner.py`. Final line: `RESULT ablation=1.00,a,b,c plan_seconds=S`.
"""

from __future__ import annotations

import time

from backend.planner.allocation import build_profiles, plan_one_cluster
from backend.planner.devices import DEFAULT_DEVICES, default_tp, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.scenarios import PAPER_ABLATION, run_ablation, run_allocation_shift
from backend.planner.schemas import PlanRequest
from backend.planner.service import make_plan
from backend.planner.simulator import SimConfig


def time_algorithm1(n_devices: int = 512) -> tuple[float, str]:
    model, device = model_shape("72B"), DEFAULT_DEVICES["H800"]
    tp = default_tp(model, device)
    cfg = SimConfig(model=model, gen_device=device, gen_devices=tp, train_devices=1, tp=tp,
                    lengths=LengthDistribution(max_tokens=20_000, median=800, sigma=0.9),
                    prompts_per_iteration=512, group_size=8, algorithm="grpo", dispatch="skew_aware")
    started = time.perf_counter()
    alloc = plan_one_cluster(build_profiles(cfg, n_devices), n_devices, tp, device)
    seconds = time.perf_counter() - started
    return seconds, f"{alloc.gen_devices} gen / {alloc.train_devices} train, {alloc.iteration_seconds:.0f} s/iter"


def main() -> None:
    plan_seconds, chosen = time_algorithm1()
    print(f"Algorithm 1, 72B on 512 H800: {plan_seconds:.3f} s -> {chosen}")
    started = time.perf_counter()
    make_plan(PlanRequest(model_size="72B", clusters=[{"device": "H800", "count": 512}], iterations=2))
    print(f"full POST /plans (Algorithm 1 + 3 simulated modes), 512 devices: {time.perf_counter() - started:.3f} s")

    rows = run_ablation()
    print("\nablation, 72B on 64 H800, outputs up to 20K tokens (speedup vs colocated)")
    print(f"{'step':<28}{'s/iter':>9}{'speedup':>9}{'paper':>7}  allocation")
    for row, paper in zip(rows, PAPER_ABLATION, strict=True):
        print(f"{row.step:<28}{row.iteration_seconds:>9.1f}{row.speedup:>9.2f}{paper:>7.2f}  "
              f"{row.gen_devices} gen / {row.train_devices} train")

    even, planned = run_allocation_shift()
    print(f"\n32B on 64 H800: even {even.gen_devices}/{even.train_devices} {even.iteration_seconds:.0f} s -> "
          f"planned {planned.gen_devices}/{planned.train_devices} {planned.iteration_seconds:.0f} s "
          f"({planned.iteration_seconds / even.iteration_seconds:.2f}x; paper ~40/24, ~0.8x)")
    hetero = make_plan(PlanRequest(model_size="32B", prompts_per_iteration=256,
                                   clusters=[{"device": "H20", "count": 32}, {"device": "H800", "count": 32}]))
    homo = make_plan(PlanRequest(model_size="32B", prompts_per_iteration=256,
                                 clusters=[{"device": "H800", "count": 64}]))
    ratio = hetero.predicted.throughput_per_cost / homo.predicted.throughput_per_cost
    print(f"heterogeneous H20 gen + H800 train vs 64 H800 (sync): {ratio:.2f}x throughput per cost (paper 1.23-1.33)")
    speedups = ",".join(f"{r.speedup:.2f}" for r in rows)
    print(f"RESULT ablation={speedups} plan_seconds={plan_seconds:.3f}")


if __name__ == "__main__":
    main()
