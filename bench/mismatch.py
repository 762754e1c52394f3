"""Training-inference mismatch benchmark: the same GRPO job with generation in bfloat16 and training in float32,
against both in float32, and the bf16 job again with sequence-level masked importance sampling.

    python bench/mismatch.py                   # ~1M tiny Llama, SFT warm start on one-digit addition, train_local

Runs, interleaved per seed (`--seeds`), each from the same SFT model:
    matched  generation.dtype float32   (engine and trainer compute the same policy: mismatch ~ float rounding)
    plain    generation.dtype bfloat16  (ratio against the bf16 behaviour logprobs, no correction)
    masked   generation.dtype bfloat16  + algorithm.is_level sequence, is_mask [low, high] (decoupled PPO: the ratio
             against the trainer's own logprobs, each sample weighted by its truncated sequence ratio, or dropped
             when that ratio leaves [low, high])
Figures are medians over the seeds: mismatch_kl is each run's mean over its iterations (k3 KL between behaviour and
trainer logprobs of the on-policy tokens, workers/training/mismatch.py); the final reward is the held-out reward
(`--eval-prompts` prompts, one seeded sample each) after the last iteration. Prints
    RESULT mismatch_kl_ratio=R reward_gap_masked=G reward_gap_plain=P matched_mismatch_kl=... bf16_mismatch_kl=...
with reward gaps = |final reward of the run - final reward of matched| (the issue's bar: ratio >= 10, masked
gap <= 0.05).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from contract.spec import JobSpec
from workers.datasets import generate_rows
from workers.local import train_local
from workers.models import build_tiny_model
from workers.training.sft import sft_warm_start

RUNS = ("matched", "plain", "masked")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per iteration")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--eval-prompts", type=int, default=512)
    parser.add_argument("--is-mask", default="0.5,2.0", help="masked IS bounds low,high")
    parser.add_argument("--is-cap", type=float, default=2.0)
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (one round of the three runs each)")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


def job_spec(args: argparse.Namespace, model_dir: Path, run: str, seed: int) -> JobSpec:
    algorithm: dict[str, Any] = {"name": "grpo", "group_size": args.group_size, "is_cap": args.is_cap}
    if run == "masked":
        low, high = (float(v) for v in args.is_mask.split(","))
        algorithm |= {"is_level": "sequence", "is_mask": [low, high]}
    return JobSpec.model_validate({
        "name": f"bench-mismatch-{run}",
        "model": str(model_dir),
        "dataset": {"builtin": "arithmetic", "num_prompts": 2048, "eval_prompts": args.eval_prompts},
        "reward": {"type": "exact_match"},
        "algorithm": algorithm,
        "generation": {"temperature": 1.0, "max_tokens": 5, "batch_size": args.prompts * args.group_size,
                       "dtype": "float32" if run == "matched" else "bfloat16", "speculative": "off"},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts,
                     "micro_batch_size": args.prompts * args.group_size, "lr": args.lr},
        "checkpoint": {"interval": args.iterations, "keep": 1},
        "seed": seed,
    })


def one_run(args: argparse.Namespace, model_dir: Path, work: Path, run: str, seed: int) -> dict[str, float]:
    started = time.perf_counter()
    result = train_local(job_spec(args, model_dir, run, seed), work / f"{run}-{seed}", eval_every=args.iterations,
                         dataset_params={"digits": 1, "ops": "+"})
    kls = [float(r.metrics["mismatch_kl"]) for r in result.records if r.metrics.get("mismatch_kl") is not None]
    masked = [float(r.metrics.get("is_masked_fraction") or 0.0) for r in result.records]
    figures = {"mismatch_kl": statistics.fmean(kls), "final_reward": result.eval_curve[-1][1],
               "start_reward": result.eval_curve[0][1], "masked_fraction": statistics.fmean(masked),
               "abs_max": max(float(r.metrics.get("mismatch_abs_max") or 0.0) for r in result.records),
               "seconds": time.perf_counter() - started}
    print(f"seed {seed} {run:8s} " + " ".join(f"{k}={v:.3g}" for k, v in figures.items()), flush=True)
    return figures


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="streamrl-mismatch-") as tmp:
        work = Path(tmp)
        base = build_tiny_model(args.preset, work / "base", seed=0)
        rows = generate_rows("arithmetic", 4000, 1000, digits=1, ops="+")
        sft = sft_warm_start(base, work / "sft", rows, steps=300, lr=3e-3, batch_size=64, seed=0, target_loss=0.55)
        print(f"sft: {sft.steps} steps, final loss {sft.final_loss:.3f}", flush=True)
        figures: dict[str, list[dict[str, float]]] = {run: [] for run in RUNS}
        for seed in seeds:  # interleaved: one round of every run per seed
            for run in RUNS:
                figures[run].append(one_run(args, sft.model_dir, work, run, seed))

    def median(run: str, key: str) -> float:
        return statistics.median(f[key] for f in figures[run])

    matched_kl, bf16_kl = median("matched", "mismatch_kl"), median("plain", "mismatch_kl")
    gap = {run: statistics.median(abs(f["final_reward"] - m["final_reward"])
                                  for f, m in zip(figures[run], figures["matched"], strict=True))
           for run in ("plain", "masked")}
    print(f"RESULT mismatch_kl_ratio={bf16_kl / max(matched_kl, 1e-30):.3g} reward_gap_masked={gap['masked']:.3f} "
          f"reward_gap_plain={gap['plain']:.3f} matched_mismatch_kl={matched_kl:.3g} bf16_mismatch_kl={bf16_kl:.3g} "
          f"masked_mismatch_kl={median('masked', 'mismatch_kl'):.3g} "
          f"final_reward_matched={median('matched', 'final_reward'):.3f} "
          f"final_reward_plain={median('plain', 'final_reward'):.3f} "
          f"final_reward_masked={median('masked', 'final_reward'):.3f} "
          f"masked_fraction={median('masked', 'masked_fraction'):.3f} seeds={len(seeds)} iterations={args.iterations}")


if __name__ == "__main__":
    main()
