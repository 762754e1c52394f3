"""How much in-flight weight updates can gain over draining, from an engine's measured decode-step cost.

Draining (async, `generation.partial_rollouts: false`) lets each iteration's batch run down to its longest sequence
before the next version loads; with in-flight updates the freed slots take the next prompts at once. What that is
worth depends on what a decode step with few rows costs next to a full one (on a device whose step time hardly grows
with the batch, a GPU far from compute-bound, the drain tail's near-empty steps cost as much as full ones), and on
how long an iteration's longest sample takes alone: a job's iteration cannot end before its longest sample has been
decoded token by token, whichever way weights are updated.

This measures the engine's per-token latency PTL(BS) on this machine (workers/generation/engines/profile.py), then
replays the same stream of iterations through the planner's continuous-batching model
(backend/planner/sim_generation.py `run_instance`) both ways: per iteration from an empty batch (draining) and as one
continuous stream (in flight). It does the same with a flat profile (every step as long as a full one), the GPU-like
bound. Lengths: the long_tail task's answers (the SFT-warmed model of bench/modes.py answers about that long), one
length per prompt, `--group` samples each, scaled by `--length-scale`. Generation only: the trainer, rewards and
weight loads are left out, so these are ceilings on generation throughput, not predictions of a job's samples/s.
`latency_bound` also counts each iteration's longest sample decoded alone (its length x PTL(1)) as a floor on that
iteration's time (an iteration's prompts are not known far ahead: async mode runs one iteration ahead):
drain time / max(in-flight time, sum of the floors).

    python bench/partial_ceiling.py [--engine hf|vllm] [--preset tiny-1m] [--batch 64] [--iterations 200]
Final line: RESULT partial_ceiling engine=.. measured_ptl=<drain time / in-flight time> flat_ptl=.. latency_bound=..
ptl_full_over_one=..
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from backend.planner.sim_generation import run_instance, step_costs  # noqa: E402
from contract.skew import PTLProfile  # noqa: E402
from workers.datasets import generate_rows  # noqa: E402
from workers.generation.engines import setup_engine  # noqa: E402
from workers.generation.engines.profile import profile_ptl  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def iteration_lengths(iterations: int, prompts: int, group: int, scale: float) -> list[np.ndarray]:
    rows = generate_rows("long_tail", iterations * prompts, seed=0)
    per_prompt = np.array([max(1, round((len(r["answer"]) + 1) * scale)) for r in rows])
    return [np.repeat(per_prompt[i * prompts:(i + 1) * prompts], group) for i in range(iterations)]


def drain_and_in_flight(lengths: list[np.ndarray], batch: int, costs: np.ndarray) -> tuple[float, float]:
    """Generation seconds of the iterations drained one by one, and as one continuous stream."""
    drained = sum(float(run_instance(it, batch, costs).max()) for it in lengths)
    return drained, float(run_instance(np.concatenate(lengths), batch, costs).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"])
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--batch", type=int, default=64, help="the instance's batch size (generation.batch_size)")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--length-scale", type=float, default=1.0, help="multiply every answer length by this")
    parser.add_argument("--ptl-tokens", type=int, default=64, help="decode steps per PTL measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(args.preset, Path(tmp) / "model", seed=0)
        engine = setup_engine(args.engine, model_dir=model_dir, max_batch_size=args.batch, device="cpu")
        sizes = [bs for bs in BATCH_SIZES if bs <= args.batch]
        profile_ptl(engine, sizes[:2], tokens=8)  # warm-up
        measured = profile_ptl(engine, sizes, tokens=args.ptl_tokens)
    for bs in sizes:
        print(f"PTL({bs:3d}) = {measured[bs] * 1e3:7.3f} ms per step ({measured[bs] / bs * 1e6:8.1f} us per token)")
    ptl = PTLProfile(tuple(measured.items()))
    full = measured[sizes[-1]]
    flat = PTLProfile(((1, full),))  # one point: every batch size costs a full step
    lengths = iteration_lengths(args.iterations, args.prompts, args.group, args.length_scale)
    flat_lengths = np.concatenate(lengths)
    print(f"{args.iterations} iterations x {args.prompts * args.group} samples: lengths p50="
          f"{np.percentile(flat_lengths, 50):.0f} p90={np.percentile(flat_lengths, 90):.0f} max={flat_lengths.max()}")
    drained, in_flight = drain_and_in_flight(lengths, args.batch, step_costs(ptl, args.batch))
    flat_drained, flat_in_flight = drain_and_in_flight(lengths, args.batch, step_costs(flat, args.batch))
    floor = sum(float(it.max()) * measured[1] for it in lengths)  # each iteration's longest sample, decoded alone
    print(f"drained {drained:.2f}s, in flight {in_flight:.2f}s, longest samples alone {floor:.2f}s (measured PTL); "
          f"flat PTL: drained {flat_drained:.2f}s, in flight {flat_in_flight:.2f}s")
    print(f"RESULT partial_ceiling engine={args.engine} measured_ptl={drained / in_flight:.3f} "
          f"flat_ptl={flat_drained / flat_in_flight:.3f} latency_bound={drained / max(in_flight, floor):.3f} "
          f"ptl_full_over_one={full / measured[1]:.2f} batch={args.batch} preset={args.preset}")


if __name__ == "__main__":
    main()
