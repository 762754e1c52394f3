"""Grouped speculative decoding (`generation.speculative`) vs none, on the long_tail task with GRPO groups.

Engine part (in this process): a tiny Llama SFT-warmed on long_tail (heavy-tailed lengths that follow the prompt),
the hf engine at batch `--batch`, `--prompts` prompts x `--group` samples per iteration at temperature 1, the same
request seeds in both arms (seeded sampling emits the same tokens with and without speculation: hf_speculative.py),
`--rounds` interleaved rounds of `--iterations` iterations each (different prompts per iteration); per arm the median
round. Tail phase = from the moment 90% of an iteration's samples have finished to its last finish; its tokens/s
counts the tokens the remaining rows emitted in it. A greedy pass checks the outputs are identical. Times are wall
clock; the `_cpu` figures use this process's CPU time instead (one torch thread), which other processes on a busy
machine disturb far less.

End-to-end part (`--e2e`, the real platform through bench/modes.py --speculative, on the same warmed model and
shape): sync and async jobs with `generation.speculative` off and group, interleaved repeats (ABBA order), median
samples/s, the generation makespan and each pool's CPU seconds per iteration, and the reward of the last iterations.

Shape: `--max-k` sets the long_tail task's largest repeat count (answers up to 3 x max_k tokens; the built-in task's
is 32) for the SFT warm start, the engine part and the jobs (an uploaded dataset). An async iteration takes about the
longer of generation and training, so the end-to-end gain shows only where generation is the bottleneck, as in RL
post-training of real models (long, heavy-tailed responses): the generation-bound shape is

    python bench/speculative.py --max-k 128 --max-tokens 512 --sft-seconds 600 --sft-loss 0.5 --e2e

(with the built-in task's answers, up to 96 tokens, a tiny-1m trainer step costs about as much as generating the
batch, and async jobs are trainer-bound: see docs/operator.md#speculative-decoding).

    python bench/speculative.py [--preset tiny-1m] [--batch 64] [--prompts 8] [--group 8] [--max-tokens 256]
                                [--max-k 32] [--rounds 3] [--iterations 3] [--threads 1] [--device cpu]
                                [--model DIR] [--sft-seconds 90 --sft-loss 0.3]
                                [--e2e --e2e-iterations 12 --e2e-repeats 3 --lora 0 --micro-batch 16]
Final line: RESULT tail_tokens_ratio=.. e2e_sync_ratio=.. e2e_async_ratio=.. acceptance=.. tokens_per_forward=..
(then the CPU-time and generation ratios; e2e ratios are `nan` without --e2e)
"""

from __future__ import annotations

import argparse
import math
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from workers.datasets.long_tail import generate_rows  # noqa: E402
from workers.generation.engine import GenerationRequest, GenerationResult, SamplingParams  # noqa: E402
from workers.generation.engines.hf import HFEngine  # noqa: E402
from workers.generation.engines.hf_speculative import StepCost, speculation_for  # noqa: E402
from workers.generation.engines.suffix_draft import SuffixDrafter  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402
from workers.training.sft import sft_warm_start  # noqa: E402

ARMS = ("off", "group")


def iteration_requests(engine: HFEngine, iteration: int, prompts: int, group: int, max_tokens: int,
                       temperature: float, max_k: int = 0) -> list[GenerationRequest]:
    rows = generate_rows(prompts, seed=100 + iteration, split="test", **({"max_k": max_k} if max_k else {}))
    return [GenerationRequest(f"{iteration}:{p}:{s}", engine.encode(row["prompt"]),
                              SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                             seed=1000 * iteration + 10 * p + s))
            for p, row in enumerate(rows) for s in range(group)]


def run_iteration(engine: HFEngine, requests: list[GenerationRequest]) -> dict[str, float]:
    """One iteration's requests through a fresh batch; tokens/s overall and in the tail phase."""
    batcher = engine._batcher()
    t0, c0 = time.perf_counter(), time.process_time()
    results: list[GenerationResult] = []
    tail_from = math.ceil(0.9 * len(requests))
    tail_start = tail_cpu = 0.0
    tail_base, tail_rows = 0, []
    for result in batcher.run(iter(requests)):
        results.append(result)
        if len(results) == tail_from:
            tail_start, tail_cpu, tail_rows = time.perf_counter(), time.process_time(), list(batcher.rows)
            tail_base = sum(len(row.response_ids) for row in tail_rows)
    end, cpu_end = time.perf_counter(), time.process_time()
    tail_tokens = sum(len(row.response_ids) for row in tail_rows) - tail_base
    tokens = sum(len(r.response_ids) for r in results)
    return {"seconds": end - t0, "cpu_seconds": cpu_end - c0, "tokens": tokens, "tail_seconds": end - tail_start,
            "tail_cpu_seconds": cpu_end - tail_cpu, "tail_tokens": tail_tokens,
            "forwards": sum(r.forward_passes for r in results), "drafted": sum(r.draft_tokens for r in results),
            "accepted": sum(r.accepted_tokens for r in results),
            "outputs": {r.request_id: tuple(r.response_ids) for r in results}}  # type: ignore[dict-item]


def set_arm(engine: HFEngine, arm: str) -> None:
    engine.speculation = speculation_for(arm, engine.max_batch_size)  # type: ignore[arg-type]
    engine.drafter = SuffixDrafter()
    engine.step_cost = StepCost()


def engine_part(args: argparse.Namespace, model_dir: Path) -> dict[str, float]:
    engine = HFEngine(model_dir, max_batch_size=args.batch, device=args.device)
    workloads = [iteration_requests(engine, i, args.prompts, args.group, args.max_tokens, 1.0, args.max_k)
                 for i in range(args.iterations)]
    set_arm(engine, "group")
    run_iteration(engine, workloads[0][:8])  # warm-up
    rounds: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    outputs: dict[str, dict[str, tuple[int, ...]]] = {arm: {} for arm in ARMS}
    for round_ in range(args.rounds):
        for arm in (ARMS if round_ % 2 == 0 else ARMS[::-1]):
            set_arm(engine, arm)
            runs = [run_iteration(engine, w) for w in workloads]
            total = {key: sum(float(r[key]) for r in runs) for key in runs[0] if key != "outputs"}
            for r in runs:
                outputs[arm].update(r["outputs"])  # type: ignore[arg-type]
            rounds[arm].append(total)
            print(f"round {round_ + 1} {arm:5s} tokens/s={total['tokens'] / total['seconds']:8.1f} "
                  f"tail tokens/s={total['tail_tokens'] / total['tail_seconds']:8.1f} "
                  f"(tail {total['tail_seconds']:.2f} of {total['seconds']:.2f} s; cpu {total['tail_cpu_seconds']:.2f} "
                  f"of {total['cpu_seconds']:.2f} s) "
                  f"tokens/forward={total['tokens'] / total['forwards']:.2f} "
                  f"acceptance={total['accepted'] / max(total['drafted'], 1):.2f}", flush=True)
    same_sampled = outputs["off"] == outputs["group"]
    greedy = {}
    for arm in ARMS:
        set_arm(engine, arm)
        greedy[arm] = run_iteration(engine, [GenerationRequest(r.request_id, r.prompt_ids, SamplingParams(
            temperature=0, max_tokens=args.max_tokens)) for r in workloads[0]])["outputs"]
    def median(arm: str, tokens: str, seconds: str) -> float:
        return statistics.median(t[tokens] / t[seconds] if t[seconds] > 0 else 0.0 for t in rounds[arm])

    def ratio(tokens: str, seconds: str) -> float:
        off = median("off", tokens, seconds)
        return median("group", tokens, seconds) / off if off > 0 else float("nan")  # nan: no tail tokens

    on = rounds["group"][-1]
    print(f"greedy identical: {greedy['off'] == greedy['group']}; seeded sampling identical: {same_sampled}")
    return {"tail_tokens_ratio": ratio("tail_tokens", "tail_seconds"), "tokens_ratio": ratio("tokens", "seconds"),
            "tail_tokens_ratio_cpu": ratio("tail_tokens", "tail_cpu_seconds"),
            "tokens_ratio_cpu": ratio("tokens", "cpu_seconds"),
            "acceptance": on["accepted"] / max(on["drafted"], 1), "tokens_per_forward": on["tokens"] / on["forwards"],
            "greedy_identical": float(greedy["off"] == greedy["group"]), "sampled_identical": float(same_sampled)}


def e2e_part(args: argparse.Namespace, model_dir: Path) -> dict[str, float]:
    """bench/modes.py --speculative on the engine part's model and shape."""
    command = [sys.executable, str(REPO / "bench" / "modes.py"), "--speculative", "--iterations",
               str(args.e2e_iterations), "--repeats", str(args.e2e_repeats), "--max-tokens", str(args.max_tokens),
               "--prompts", str(args.prompts), "--group", str(args.group), "--gen-batch", str(args.batch),
               "--device", args.device, "--preset", args.preset, "--model", str(model_dir),
               "--max-k", str(args.max_k), "--lora", str(args.lora), "--micro-batch", str(args.micro_batch)]
    print("e2e:", " ".join(command[1:]), flush=True)
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    print(out.stdout[-6000:], out.stderr[-2000:] if out.returncode else "", flush=True)
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("RESULT speculative")), "")
    return {key: float(value) for key, value in re.findall(r"(\w+)=([-\d.e+naif]+)", line)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--sft-seconds", type=float, default=90.0)
    parser.add_argument("--sft-loss", type=float, default=0.3, help="stop the SFT warm start at this loss")
    parser.add_argument("--max-k", type=int, default=0,
                        help="long_tail repeat counts up to this (0: the built-in task's 32): a longer tail")
    parser.add_argument("--lora", type=int, default=0, help="e2e: training.lora rank (0: full fine-tuning)")
    parser.add_argument("--micro-batch", type=int, default=16, help="e2e: training.micro_batch_size")
    parser.add_argument("--model", help="an SFT-warmed model directory to use instead of warming one; where it "
                        "does not exist yet, the warmed model is saved there")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--e2e", action="store_true", help="also run sync/async jobs (bench/modes.py --speculative)")
    parser.add_argument("--e2e-iterations", type=int, default=12)
    parser.add_argument("--e2e-repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    random.seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model and Path(args.model).exists():
            model_dir = Path(args.model)
            print(f"model {model_dir}", flush=True)
        else:
            base = build_tiny_model(args.preset, Path(tmp) / "base", seed=0)
            rows = generate_rows(512, seed=1, split="train", **({"max_k": args.max_k} if args.max_k else {}))
            sft = sft_warm_start(base, Path(tmp) / "sft", rows, steps=100_000, time_budget_s=args.sft_seconds,
                                 target_loss=args.sft_loss, seed=0, device=args.device)
            model_dir = sft.model_dir
            print(f"SFT {sft.steps} steps, loss {sft.final_loss:.3f}", flush=True)
            if args.model:  # kept for the next run (--model DIR again skips the warm start)
                shutil.copytree(model_dir, args.model)
                model_dir = Path(args.model)
        print(f"shape: long_tail repeat counts up to {args.max_k or 32}, {args.prompts} prompts x {args.group} "
              f"samples, batch {args.batch}, max_tokens {args.max_tokens}, {args.preset}, {args.device}; e2e: "
              f"{'LoRA rank ' + str(args.lora) if args.lora else 'full fine-tuning'}, micro-batch {args.micro_batch}",
              flush=True)
        figures = engine_part(args, model_dir)
        e2e = e2e_part(args, model_dir) if args.e2e else {}
    print(f"RESULT tail_tokens_ratio={figures['tail_tokens_ratio']:.3f} "
          f"e2e_sync_ratio={e2e.get('e2e_sync_ratio', float('nan')):.3f} "
          f"e2e_async_ratio={e2e.get('e2e_async_ratio', float('nan')):.3f} "
          f"acceptance={figures['acceptance']:.3f} tokens_per_forward={figures['tokens_per_forward']:.3f} "
          f"tokens_ratio={figures['tokens_ratio']:.3f} tail_tokens_ratio_cpu={figures['tail_tokens_ratio_cpu']:.3f} "
          f"tokens_ratio_cpu={figures['tokens_ratio_cpu']:.3f} greedy_identical={int(figures['greedy_identical'])} "
          f"sampled_identical={int(figures['sampled_identical'])} "
          f"reward_off={e2e.get('reward_off', float('nan')):.3f} "
          f"reward_group={e2e.get('reward_group', float('nan')):.3f} "
          + " ".join(f"e2e_{key}={e2e.get(key, float('nan')):.3f}" for key in (
              "gen_sync_ratio", "gen_async_ratio", "gen_cpu_sync_ratio", "gen_cpu_async_ratio")))


if __name__ == "__main__":
    main()
