"""On-policy distillation benchmark: a student distilled from a teacher built here, against the same student trained
with the task reward alone (GRPO), on the same sample budget.

    python bench/distill.py                    # student: fresh tiny-1m; teacher: tiny-1m SFT'd on one-digit sums

Setup (all built here, same character tokenizer): the teacher is `--teacher-preset` (seed 1) fine-tuned on each
one-digit addition problem in rounds of `--teacher-steps` until its own held-out reward reaches `--teacher-target` (or
`--teacher-rounds` are spent), and cached under `<tmp>/streamrl-bench-distill/` (keyed by preset, reward, steps,
batch, target and rounds), so a rerun reuses it. The student is `--preset` (seed 0) freshly initialised (or, with
`--student-loss`, warm-started by SFT to that loss). `--reward number` (the default) rewards an answer that is a
number (the format the teacher gives and a fresh student rarely does); `--reward exact` the right sum.
Runs, interleaved per seed, each from that student and with the same iterations x prompts x group_size samples:
    rl       algorithm grpo, the task reward
    distill  algorithm distill, teacher = the teacher (reward_coef 0: the teacher's per-token reverse KL only),
             with `--teacher-topk` k > 0 also the forward KL over the teacher's top-k at every position (x --topk-coef)
Each evaluates the held-out reward (`--eval-prompts` prompts, one seeded sample each, at temperature 1) every
`--eval-every` iterations; distill also records reverse_kl (student vs teacher, on its own samples) each iteration.
distill_iterations_ratio = (first evaluated iteration at which distill's held-out reward, the mean over the seeds,
reaches rl's final held-out reward, the mean over the seeds) / rl's iterations (inf when it never does). Means, not
per-seed ratios: GRPO from a fresh student is all-or-nothing (it finds the format on some seeds and stays at 0.0 on
the others), and a seed where rl ends at 0.0 would count any distill gain as reaching it; the per-seed ratios are
printed too (`per_seed`; reaching rl's 0.0 does not count). Prints the curves and
    RESULT distill_iterations_ratio=R heldout_distill=D heldout_rl=L teacher_heldout=T reverse_kl_first=.. last=..
(the issue's bar: R <= 0.5). What it measured (2 shared cores, noisy) is in docs/tinker.md#distillation-bench.
Why these defaults: from a student warm-started to "right format, often wrong" (the earlier default), or with
`--reward exact`, neither run learns in a bench-sized budget: what is left to learn is per-problem facts, which
sampled-token updates (4 problems a step) barely move in 16-60 steps; at lr >= 1e-3 they degraded a warm-started
student (a hand-written loop outside the platform did the same, so it is the setting, not the trainer).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from contract.spec import TEACHER_TOPK_DEFAULT, TOPK_COEF_DEFAULT, JobSpec
from workers.datasets import generate_rows
from workers.local import train_local
from workers.models import build_tiny_model
from workers.training.sft import sft_warm_start

RUNS = ("rl", "distill")
# the task reward: `number` (the answer is a number: the format the teacher gives and a fresh student rarely does),
# `exact` (the right sum: per-problem facts, which neither run learns in a bench-sized budget from a fresh student)
REWARDS: dict[str, dict[str, Any]] = {"number": {"type": "regex", "params": {"pattern": "^[0-9]+$"}},
                                      "exact": {"type": "exact_match"}}
TASK = {"digits": 1, "ops": "+"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny-1m", help="the student")
    parser.add_argument("--teacher-preset", default="tiny-1m",
                        help="the teacher (tiny-5m: larger, ~4x the SFT time of tiny-1m on this host)")
    parser.add_argument("--teacher-steps", type=int, default=300, help="SFT steps per round")
    parser.add_argument("--teacher-batch", type=int, default=32)
    parser.add_argument("--teacher-target", type=float, default=0.9, help="the teacher's held-out reward to reach")
    parser.add_argument("--teacher-rounds", type=int, default=3)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "streamrl-bench-distill"),
                        help="where the trained teacher is kept between runs ('' : not kept)")
    parser.add_argument("--student-loss", type=float, default=0.0,
                        help="SFT warm start of the student to this loss (0: none, a fresh student)")
    parser.add_argument("--reward", choices=sorted(REWARDS), default="number",
                        help="the task reward (RL's signal) and the held-out metric of both runs")
    parser.add_argument("--iterations", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per iteration")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--entropy-coef", type=float, default=0.0,
                        help="algorithm.entropy_coef of both runs (an entropy bonus in the loss; 0: none, the default)")
    parser.add_argument("--teacher-topk", type=int, default=TEACHER_TOPK_DEFAULT,
                        help="algorithm.teacher_topk of the distill run (the teacher's top-k forward KL term; 0: off; "
                             "default: the spec's)")
    parser.add_argument("--topk-coef", type=float, default=TOPK_COEF_DEFAULT,
                        help="algorithm.topk_coef of the distill run (default: the spec's)")
    parser.add_argument("--eval-prompts", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds (one round of both runs each)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared 2-core host two threads contend, ~5x slower per step)")
    return parser.parse_args()


def job_spec(args: argparse.Namespace, model_dir: Path, teacher: Path, run: str, seed: int) -> JobSpec:
    algorithm: dict[str, Any] = {"name": "grpo", "group_size": args.group_size, "entropy_coef": args.entropy_coef}
    if run == "distill":
        algorithm = {"name": "distill", "group_size": args.group_size, "teacher": str(teacher),
                     "entropy_coef": args.entropy_coef, "teacher_topk": args.teacher_topk}
        if args.teacher_topk > 0:
            algorithm["topk_coef"] = args.topk_coef
    return JobSpec.model_validate({
        "name": f"bench-distill-{run}",
        "model": str(model_dir),
        "dataset": {"builtin": "arithmetic", "num_prompts": 2048, "eval_prompts": args.eval_prompts},
        "reward": REWARDS[args.reward],
        "algorithm": algorithm,
        "generation": {"temperature": 1.0, "max_tokens": 5, "batch_size": args.prompts * args.group_size,
                       "speculative": "off"},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts,
                     "micro_batch_size": args.prompts * args.group_size, "lr": args.lr},
        "checkpoint": {"interval": args.iterations, "keep": 1},
        "seed": seed,
    })


def one_run(args: argparse.Namespace, student: Path, teacher: Path, work: Path, run: str,
            seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    result = train_local(job_spec(args, student, teacher, run, seed), work / f"{run}-{seed}",
                         eval_every=args.eval_every, dataset_params=TASK)
    curve = [(int(it), float(value)) for it, value in result.eval_curve]
    kl = [float(r.metrics["reverse_kl"]) for r in result.records if r.metrics.get("reverse_kl") is not None]
    topk = [float(r.metrics["topk_kl"]) for r in result.records if r.metrics.get("topk_kl") is not None]
    print(f"{run} seed {seed}: held-out {' '.join(f'{it}:{v:.3f}' for it, v in curve)}"
          + (f" | reverse_kl {' '.join(f'{v:.2f}' for v in kl)}" if kl else "")
          + (f" | topk_kl {' '.join(f'{v:.2f}' for v in topk)}" if topk else "")
          + f" ({time.perf_counter() - started:.0f}s)", flush=True)
    return {"curve": curve, "kl": kl, "topk_kl": topk}


def teacher_heldout(args: argparse.Namespace, teacher: Path, work: Path) -> float:
    """The teacher's own held-out reward: a one-iteration run's evaluation before its step."""
    spec = job_spec(args, teacher, teacher, "rl", 0)
    spec = spec.model_copy(update={"training": spec.training.model_copy(update={"iterations": 1})})
    result = train_local(spec, work, eval_every=1, dataset_params=TASK)
    return float(result.eval_curve[0][1]) if result.eval_curve else math.nan


def trained_teacher(args: argparse.Namespace, rows: list[dict[str, Any]], work: Path) -> tuple[Path, float]:
    """The teacher and its held-out reward: from the cache when a run with these settings trained it, else SFT on
    the task's correct answers (`rows`: each one-digit problem once) in rounds of --teacher-steps (lr 3e-3, then
    1e-3) until its held-out reward reaches --teacher-target."""
    key = (f"{args.teacher_preset}-{args.reward}-s{args.teacher_steps}-b{args.teacher_batch}-t{args.teacher_target}"
           f"-r{args.teacher_rounds}")
    cached = Path(args.cache) / key if args.cache else None
    if cached is not None and (cached / "heldout.json").exists():
        reward = float(json.loads((cached / "heldout.json").read_text())["heldout"])
        print(f"teacher {args.teacher_preset}: cached at {cached}, held-out reward {reward:.3f}", flush=True)
        return cached / "model", reward
    model_dir, reward, steps, started = build_tiny_model(args.teacher_preset, work / "teacher-0", seed=1), 0.0, 0, \
        time.perf_counter()
    for round_ in range(1, args.teacher_rounds + 1):
        result = sft_warm_start(model_dir, work / f"teacher-{round_}", rows, steps=args.teacher_steps,
                                lr=3e-3 if round_ == 1 else 1e-3, batch_size=args.teacher_batch, seed=round_)
        model_dir, steps = result.model_dir, steps + result.steps
        reward = teacher_heldout(args, model_dir, work / f"teacher-eval-{round_}")
        print(f"teacher {args.teacher_preset}: {steps} SFT steps, loss {result.final_loss:.3f}, held-out reward "
              f"{reward:.3f} ({time.perf_counter() - started:.0f}s)", flush=True)
        if reward >= args.teacher_target:
            break
    if cached is not None:
        shutil.rmtree(cached, ignore_errors=True)
        shutil.copytree(model_dir, cached / "model")
        (cached / "heldout.json").write_text(json.dumps({"heldout": reward, "sft_steps": steps}))
        model_dir = cached / "model"
    return model_dir, reward


def reach_ratio(distill: list[tuple[int, float]], target: float, iterations: int) -> float:
    """When distill's held-out first reaches `target` (and is above its own start: reaching an RL student's 0.0
    does not count), as a fraction of the iterations; inf if never."""
    start = distill[0][1] if distill and distill[0][0] == 0 else -math.inf
    reached = next((it for it, value in distill if it > 0 and value >= target and value > start), None)
    return reached / iterations if reached is not None else math.inf


def mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The seeds' curves averaged at each evaluated iteration (every run evaluates at the same iterations)."""
    return [(it, statistics.fmean(curve[i][1] for curve in curves)) for i, (it, _) in enumerate(curves[0])]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-distill-") as tmp:
        work = Path(tmp)
        rows = generate_rows("arithmetic", 4000, 1000, **TASK)
        table = list({row["prompt"]: row for row in rows}.values())  # the task's correct answers, each problem once
        teacher_dir, teacher_reward = trained_teacher(args, table, work)
        student_base = build_tiny_model(args.preset, work / "student-base", seed=0)
        student = student_base
        if args.student_loss > 0:
            warm = sft_warm_start(student_base, work / "student", rows, steps=150, lr=3e-3, batch_size=32, seed=0,
                                  target_loss=args.student_loss)
            print(f"student {args.preset}: {warm.steps} SFT steps, loss {warm.final_loss:.3f}", flush=True)
            student = warm.model_dir
        figures: dict[str, list[dict[str, Any]]] = {run: [] for run in RUNS}
        for seed in seeds:  # interleaved: one round of both runs per seed
            for run in RUNS:
                figures[run].append(one_run(args, student, teacher_dir, work, run, seed))

    per_seed = [reach_ratio(d["curve"], r["curve"][-1][1], args.iterations)
                for d, r in zip(figures["distill"], figures["rl"], strict=True)]
    curves = {run: mean_curve([f["curve"] for f in figures[run]]) for run in RUNS}
    for run in RUNS:
        print(f"{run} mean over {len(seeds)} seeds: held-out {' '.join(f'{it}:{v:.3f}' for it, v in curves[run])}")
    ratio = reach_ratio(curves["distill"], curves["rl"][-1][1], args.iterations)
    final = {run: curves[run][-1][1] for run in RUNS}
    kl_first = statistics.fmean(f["kl"][0] for f in figures["distill"])
    kl_last = statistics.fmean(f["kl"][-1] for f in figures["distill"])
    topk = ""
    if all(f["topk_kl"] for f in figures["distill"]):
        topk = (f"topk_kl_first={statistics.fmean(f['topk_kl'][0] for f in figures['distill']):.3f} "
                f"topk_kl_last={statistics.fmean(f['topk_kl'][-1] for f in figures['distill']):.3f} ")
    print(f"RESULT distill_iterations_ratio={ratio:.3g} heldout_distill={final['distill']:.3f} "
          f"heldout_rl={final['rl']:.3f} teacher_heldout={teacher_reward:.3f} reverse_kl_first={kl_first:.3f} "
          f"reverse_kl_last={kl_last:.3f} {topk}per_seed={','.join(f'{r:.3g}' for r in per_seed)} seeds={len(seeds)} "
          f"iterations={args.iterations} lr={args.lr:g} entropy_coef={args.entropy_coef:g} "
          f"teacher_topk={args.teacher_topk} topk_coef={args.topk_coef if args.teacher_topk > 0 else 0:g} "
          f"wall_s={time.perf_counter() - started:.0f}")


if __name__ == "__main__":
    main()
