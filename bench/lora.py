"""Full fine-tuning vs LoRA on the same job: bytes and seconds per weight sync, peak RSS, iteration seconds, reward.

    python bench/lora.py [--presets tiny-100m,tiny-15m] [--rounds 3] [--iterations 3] [--rank 16]
                         [--prompts 4] [--max-tokens 16]     # prompts per iteration (x 4 samples), response cap

Models are built locally (workers/models/tiny.py presets, random weights). Every run is a fresh PROCESS running
train-local on the same spec (the colocated driver: generate with the hf engine, train one optimizer step, publish
the new weights through the shared store and load them into the engine; `training.lora` the only difference), so
its peak RSS is its own. Rounds interleave full and LoRA (full, lora, full, lora, ...) so drifts in the machine's
load hit both alike; each figure is the median over rounds of the run's mean over its iterations after the first
(the first pays the allocator's and the page cache's warm-up). Reward is the mean training reward of the last
iteration (same seed, same prompts in both). Peak RSS is the driver process's: the trainer plus the colocated
engine, which holds one copy of the base model in both (LoRA: plus the adapter).

    RESULT lora preset=tiny-15m params=... full_sync_bytes=... lora_sync_bytes=... ...
    RESULT sync_bytes_ratio=... peak_rss_ratio=... iteration_ratio=... reward_full=... reward_lora=...

The last line is for the first preset (the 100M one by default); targets: sync_bytes_ratio <= 0.02, peak_rss_ratio
<= 0.6, iteration_ratio <= 0.8.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from processes import child_pythonpath  # noqa: E402  (bench/, the script's directory)

FIGURES = ("sync_bytes", "sync_s", "peak_rss_mb", "iteration_s", "gen_s", "train_s", "reward")


def job_spec(model_dir: Path, iterations: int, lora_rank: int | None, prompts: int, max_tokens: int) -> Any:
    from contract.spec import JobSpec

    lora = {"rank": lora_rank, "alpha": 2.0 * lora_rank} if lora_rank else None
    return JobSpec.model_validate({
        "model": str(model_dir), "mode": "colocated", "seed": 0,
        "dataset": {"builtin": "arithmetic", "num_prompts": 64, "eval_prompts": 0},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},  # some reward even for a random model
        "algorithm": {"name": "grpo", "group_size": 4},
        "generation": {"max_tokens": max_tokens, "batch_size": 16},
        "training": {"iterations": iterations, "prompts_per_iteration": prompts, "micro_batch_size": 16,
                     "lr": 1e-3 if lora_rank else 1e-4, "lora": lora},
        "checkpoint": {"interval": 1_000_000, "keep": 1},  # the last iteration's only
    })


def child(model_dir: str, iterations: int, lora_rank: int, prompts: int, max_tokens: int, out: str) -> None:
    """One run in this process: train-local, then its figures as JSON."""
    import torch

    from workers.local import train_local

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    spec = job_spec(Path(model_dir), iterations, lora_rank or None, prompts, max_tokens)
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as job_dir:
        result = train_local(spec, job_dir, eval_every=0)
    rows = [r.metrics for r in result.records][1:] or [r.metrics for r in result.records]
    figures = {
        "sync_bytes": statistics.mean(r.get("weight_sync_bytes", 0.0) for r in rows),
        "sync_s": statistics.mean(r.get("weight_sync_seconds", 0.0) for r in rows),
        "iteration_s": statistics.mean(r["iteration_seconds"] for r in rows),
        "gen_s": statistics.mean(r.get("gen_seconds", 0.0) for r in rows),  # colocated: the phases add up
        "train_s": statistics.mean(r.get("train_seconds", 0.0) for r in rows),
        "reward": result.records[-1].reward,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
    }
    Path(out).write_text(json.dumps(figures))


def run_once(model_dir: Path, args: argparse.Namespace, lora_rank: int, tmp: Path) -> dict[str, float]:
    out = tmp / f"run-{os.getpid()}-{lora_rank}.json"
    shape = [str(args.iterations), str(lora_rank), str(args.prompts), str(args.max_tokens)]
    env = {**os.environ, "PYTHONPATH": child_pythonpath(REPO), "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([sys.executable, __file__, "--child", str(model_dir), *shape, str(out)], check=True, env=env)
    figures: dict[str, float] = json.loads(out.read_text())
    return figures


def bench_preset(preset: str, args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, float]]:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model(preset, tmp / preset, seed=0)
    runs: dict[str, list[dict[str, float]]] = {"full": [], "lora": []}
    rank = args.rank
    for index in range(args.rounds):
        for name, lora_rank in (("full", 0), ("lora", rank)) if index % 2 == 0 else (("lora", rank), ("full", 0)):
            runs[name].append(run_once(model_dir, args, lora_rank, tmp))
            print(f"  {preset} round {index + 1} {name}: {runs[name][-1]}", flush=True)
    medians = {name: {f: statistics.median(r[f] for r in found) for f in FIGURES} for name, found in runs.items()}
    params = int(medians["full"]["sync_bytes"] / 4)  # the full model's sync: float32, 4 bytes a parameter
    cells = " ".join(f"{name}_{f}={value:.4g}" for name, m in medians.items() for f, value in m.items())
    print(f"RESULT lora preset={preset} params={params / 1e6:.1f}M rank={rank} rounds={args.rounds} "
          f"iterations={args.iterations} prompts={args.prompts} max_tokens={args.max_tokens} {cells}", flush=True)
    return medians


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        iterations, rank, prompts, max_tokens = (int(x) for x in sys.argv[3:7])
        child(sys.argv[2], iterations, rank, prompts, max_tokens, sys.argv[7])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="tiny-100m,tiny-15m", help="the first one gives the final RESULT line")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per iteration (group size 4)")
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    if args.rounds < 1 or args.iterations < 2:
        parser.error("--rounds >= 1 and --iterations >= 2 (the first iteration is a warm-up)")
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        results = {p: bench_preset(p, args, Path(tmp))
                   for p in args.presets.split(",")}
    full, lora = results[args.presets.split(",")[0]].values()
    print(f"RESULT sync_bytes_ratio={lora['sync_bytes'] / full['sync_bytes']:.4f} "
          f"peak_rss_ratio={lora['peak_rss_mb'] / full['peak_rss_mb']:.3f} "
          f"iteration_ratio={lora['iteration_s'] / full['iteration_s']:.3f} "
          f"reward_full={full['reward']:.3f} reward_lora={lora['reward']:.3f}")


if __name__ == "__main__":
    main()
