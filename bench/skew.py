"""Skewness-aware dispatch on a real engine: generation makespan of random+FIFO vs skew_aware+LPT (paper §4.2).

    python bench/skew.py [--prompts 128 --instances 2 --batch 8 --sft-seconds 60 --repeats 2]
    python bench/skew.py --keep-model M; for i in 1 2 3 4; do python bench/skew.py --model-dir M; done  (median)

A tiny Llama (workers/models) is SFT-warmed briefly on the long_tail task (workers/training/sft.py) so that its
response lengths are heavy-tailed and follow the prompt. Instances are `hf` engines (continuous batching, one CPU
thread); they run one after another, each timed by the CPU time its process spends (one core per instance, as one
accelerator per instance; CPU time is what other load on a shared machine does not inflate, wall time is printed
too), and the makespan of a run is the max over its instances. Every request is seeded from (prompt_id, epoch), so
the three policies generate identical samples and differ only in where and in which order prompts run.

Epoch 0 (random dispatch) trains the length ranker; epoch 1 is measured for:
  random + FIFO | skew_aware + LPT with the ranker's predictions | skew_aware + LPT with oracle (true) lengths.
Each policy runs `--repeats` times (interleaved); an instance's time is its best run (least disturbed by other load).
The random+FIFO makespan is the mean over `--random-splits` different random splits (one split can be lucky).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract.skew import PTLProfile, SplitPlan, random_split, skew_aware_split  # noqa: E402
from workers.datasets.long_tail import generate_rows  # noqa: E402
from workers.dispatch.metrics import recall_top, skew_metrics  # noqa: E402
from workers.dispatch.ptl import measure_ptl  # noqa: E402
from workers.dispatch.ranker import FeatureRidgeRanker  # noqa: E402
from workers.generation.engine import GenerationEngine, GenerationRequest, SamplingParams  # noqa: E402
from workers.generation.engines import setup_engine  # noqa: E402
from workers.models.tiny import build_tiny_model  # noqa: E402
from workers.training.sft import sft_warm_start  # noqa: E402


@dataclass
class RunResult:
    instance_s: list[float]  # CPU seconds per instance
    wall_s: list[float]  # wall seconds per instance
    lengths: dict[str, list[int]]  # prompt_id -> response tokens of each of its group's samples
    finished: list[tuple[float, str, int]]  # (CPU seconds since the instance started, instance, length)

    def prompt_length(self, prompt_id: str) -> float:
        """A prompt's length: the mean over its group (what the ranker predicts)."""
        group = self.lengths[prompt_id]
        return sum(group) / len(group)


def run_plan(engine: GenerationEngine, rows: list[dict], plan: SplitPlan, *, epoch: int, max_tokens: int,
             group: int, temperature: float) -> RunResult:
    """Each instance's prompts (x group samples), in the plan's order, through the engine; one instance at a time."""
    instance_s, wall_s, finished = [], [], []
    lengths: dict[str, list[int]] = {}
    for a in plan.assignments:
        requests = [
            GenerationRequest(
                request_id=f"{rows[i]['prompt_id']}#{g}",
                prompt_ids=engine.encode(rows[i]["prompt"]),  # type: ignore[attr-defined]
                sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens,
                                        seed=zlib.crc32(f"{rows[i]['prompt_id']}:{epoch}:{g}".encode())),
            )
            for i in a.prompt_indices
            for g in range(group)
        ]
        start, wall = time.process_time(), time.perf_counter()
        for result in engine.generate_stream(iter(requests)):
            lengths.setdefault(result.request_id.rsplit("#", 1)[0], []).append(len(result.response_ids))
            finished.append((time.process_time() - start, str(a.instance), len(result.response_ids)))
        instance_s.append(time.process_time() - start)
        wall_s.append(time.perf_counter() - wall)
    return RunResult(instance_s, wall_s, lengths, finished)


def simulated_makespan(plan: SplitPlan, lengths: dict[str, list[int]], ids: list[str], batch: int,
                       ptl: PTLProfile) -> float:
    """Noise-free companion figure: replay each instance's admission order with the real response lengths through a
    continuous-batching model (`batch` slots, backfill in order, a step costs PTL(active sequences)); max over
    instances. It leaves out per-admission engine costs (prefill, KV-cache splicing) that the timings include."""
    worst = 0.0
    for a in plan.assignments:
        queue = deque(length for i in a.prompt_indices for length in lengths[ids[i]])
        running: list[int] = []
        elapsed = 0.0
        while queue or running:
            while queue and len(running) < batch:
                running.append(max(1, queue.popleft()))
            elapsed += ptl(len(running))
            running = [left - 1 for left in running if left > 1]
        worst = max(worst, elapsed)
    return worst


def prepare_model(workdir: Path, preset: str, sft_steps: int, sft_seconds: float, seed: int) -> Path:
    base = build_tiny_model(preset, workdir / "base", seed=seed)
    sft_rows = generate_rows(4000, seed=seed + 1000)
    result = sft_warm_start(base, workdir / "sft", sft_rows, steps=sft_steps, batch_size=16, lr=3e-3, seed=seed,
                            time_budget_s=sft_seconds)
    print(f"sft: {result.steps} steps in {result.seconds:.0f}s, final loss {result.final_loss:.3f}")
    return result.model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128, help="fewer makes ~1 s runs that load noise swamps")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16, help="max concurrent sequences per instance")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--sft-seconds", type=float, default=900.0, help="SFT time budget")
    parser.add_argument("--model-dir", help="use this (already warmed) model instead of building one")
    parser.add_argument("--keep-model", help="copy the warmed model here (for later runs' --model-dir)")
    parser.add_argument("--group", type=int, default=4, help="samples per prompt (GRPO group)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per policy (an instance's best counts)")
    parser.add_argument("--random-splits", type=int, default=3, help="random+FIFO baselines averaged")
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.instances < 2:
        parser.error("--instances must be >= 2")
    if args.batch < args.group or args.batch % args.group:
        parser.error("--batch must be a multiple of --group")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    with tempfile.TemporaryDirectory(prefix="streamrl-skew-") as tmp:
        model_dir = Path(args.model_dir) if args.model_dir else prepare_model(
            Path(tmp), args.preset, args.sft_steps, args.sft_seconds, args.seed)
        if args.keep_model:
            shutil.copytree(model_dir, args.keep_model, dirs_exist_ok=True)
        engine = setup_engine("hf", model_dir=model_dir, max_batch_size=args.batch)
        g = args.group
        sizes = sorted({1, g, 2 * g, args.batch // 2, args.batch} - {0})
        ptl = measure_ptl(engine, sizes, tokens=32, repeats=2)
        print("PTL(BS) ms/token: " + "  ".join(f"{bs}:{s * 1e3:.2f}" for bs, s in ptl.points))
        # the split counts prompts; each prompt is `group` sequences of the engine's batch
        prompt_batch = max(1, args.batch // g)
        ptl_prompts = PTLProfile(tuple((bs // g, s) for bs, s in ptl.points if bs >= g and bs % g == 0))
        rows = generate_rows(args.prompts, seed=args.seed)
        ids = [r["prompt_id"] for r in rows]
        n, n_inst = len(rows), args.instances

        def run(plan: SplitPlan, epoch: int) -> RunResult:
            return run_plan(engine, rows, plan, epoch=epoch, max_tokens=args.max_tokens, group=args.group,
                            temperature=args.temperature)

        # epoch 0: what the ranker learns from (random dispatch; in a job this is the previous iteration)
        epoch0 = run(random_split(n, n_inst, seed=args.seed, max_batch_size=prompt_batch), epoch=0)
        ranker = FeatureRidgeRanker()
        for row in rows:
            for length in epoch0.lengths[row["prompt_id"]]:
                ranker.observe(row["prompt_id"], row["prompt"], length)
        ranker.refit()
        predicted = ranker.predict(ids, [r["prompt"] for r in rows])

        # epoch 1: the policies on identical samples; random+FIFO over several random splits (its mean is the base)
        random_names = [f"random+FIFO #{k}" for k in range(args.random_splits)]
        plans: dict[str, SplitPlan] = {
            name: random_split(n, n_inst, seed=args.seed + 1 + k, max_batch_size=prompt_batch)
            for k, name in enumerate(random_names)
        }
        first = run(plans[random_names[0]], epoch=1)
        true = [first.prompt_length(i) for i in ids]
        plans["skew_aware+LPT (predicted)"] = skew_aware_split(
            predicted, n_inst, ptl_prompts, recent_lengths=ranker.recent_lengths(), alpha=args.alpha,
            max_batch_size=prompt_batch)
        plans["skew_aware+LPT (oracle)"] = skew_aware_split(
            true, n_inst, ptl_prompts, recent_lengths=true, alpha=args.alpha, max_batch_size=prompt_batch)
        best: dict[str, RunResult] = {random_names[0]: first}
        mismatched = 0
        for rep in range(args.repeats):
            for name, plan in plans.items():
                if name == random_names[0] and rep == 0:
                    continue
                again = run(plan, epoch=1)
                mismatched = max(mismatched, sum(sorted(again.lengths[i]) != sorted(first.lengths[i]) for i in ids))
                prev = best.get(name)
                if prev is None:
                    best[name] = again
                else:
                    prev.instance_s = [min(a, b) for a, b in zip(prev.instance_s, again.instance_s, strict=True)]
                    prev.wall_s = [min(a, b) for a, b in zip(prev.wall_s, again.wall_s, strict=True)]

    print(f"\n{n} long_tail prompts x {args.group} samples, {n_inst} instances x batch {args.batch}, "
          f"max_tokens {args.max_tokens}, temperature {args.temperature}; prompts whose samples differed between "
          f"runs: {mismatched}")
    held_out = generate_rows(256, seed=args.seed + 7)
    features_recall = recall_top(ranker.predict([f"new-{i}" for i in range(256)], [r["prompt"] for r in held_out]),
                                 [len(r["answer"]) for r in held_out], 0.2)
    makespans = {}
    for name, plan in plans.items():
        res = best[name]
        makespans[name] = max(res.instance_s)
        metrics = skew_metrics(0.0, [f[2] for f in res.finished], [f[0] for f in res.finished],
                               [f[1] for f in res.finished])
        print(f"{name:27s} makespan {makespans[name]:7.2f}s cpu ({max(res.wall_s):6.2f}s wall)  instances "
              + " ".join(f"{s:6.2f}" for s in res.instance_s)
              + f"  long-tail instances {plan.n_long_instances}"
              + f"  prompt batches {[a.batch_size for a in plan.assignments]}"
              + f"  tail {metrics.tail_fraction:.2f}  p99/p50 {metrics.length_ratio:.1f}")
    recalls = {f: recall_top(predicted, true, f) for f in (0.2, 0.1, 0.05)}
    print("ranker recall of the true longest 20/10/5%: " + " ".join(f"{v:.2f}" for v in recalls.values())
          + f"  (features only, unseen prompts, vs answer length: {features_recall:.2f})")
    simulated = {name: simulated_makespan(plan, first.lengths, ids, args.batch, ptl) for name, plan in plans.items()}
    sim_base = sum(simulated[name] for name in random_names) / len(random_names)
    print("simulated from the real lengths (no timing noise): predicted/random "
          f"{simulated['skew_aware+LPT (predicted)'] / sim_base:.3f}  oracle/random "
          f"{simulated['skew_aware+LPT (oracle)'] / sim_base:.3f}")
    base = sum(makespans[name] for name in random_names) / len(random_names)
    print(f"random+FIFO mean makespan {base:.2f}s cpu over {len(random_names)} random splits")
    p = makespans["skew_aware+LPT (predicted)"] / base
    o = makespans["skew_aware+LPT (oracle)"] / base
    print(f"RESULT predicted_over_random={p:.3f} oracle_over_random={o:.3f} recall20={recalls[0.2]:.2f}")


if __name__ == "__main__":
    main()
