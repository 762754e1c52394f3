"""Learning benchmark: a ~1M-parameter tiny Llama, SFT warm start on arithmetic, then GRPO with `train_local`.

    python bench/learn.py                      # defaults tuned to finish in < 5 minutes on 2 (shared) CPU cores
    python bench/learn.py --throughput --preset tiny-5m   # trainer tokens/s only (no RL): see below

Prints the SFT summary, one line per RL iteration, the held-out reward curve (mean exact-match reward of one seeded
sample per held-out prompt at the training temperature) and a final line
    RESULT reward_start=X reward_end=Y gain=G reward_best=B best_iteration=I reward_final=Y final_minus_best=D ...
reward_start is measured on the SFT model before any RL step, reward_end (= reward_final) after the last one,
reward_best is the highest held-out reward of the curve (at best_iteration); seconds covers everything (model
build, SFT, RL, evaluations). Before it, the training signals per 20 iterations (entropy, clip fraction, grad norm,
mismatch KL) say why the curve moves.

Task choice: one-digit addition (`--digits 1`). A 1M model does not get past ~0% exact match on two-digit addition
within a minute of SFT on 2 shared cores, so RL would see no reward; on one digit, 100 SFT steps give a model with
the right format that is right ~35-45% of the time when sampled at temperature 1. Eval rows come from the task's
held-out split (different draws from train), but with one-digit operands there are only 100 distinct problems, so
held-out rows repeat problems seen in training: the curve measures the policy's reward, not generalisation.
GRPO lr 2e-4 (Adam): 1e-3 and above sharpened the policy onto wrong answers (entropy collapse) in our runs.

`--throughput`: training tokens/s (real response tokens per second of `train_iteration`: forward, backward, AdamW)
on one iteration's worth of `long_tail` samples (prompts x group-size rows, heavy-tailed lengths), for the padded
path (one micro-batch of every sample, as the RL run above uses; length-sorted chunks of `--micro-batch` samples;
the sync/async driver's micro-steps on arrival-order chunks) against token-budget micro-batches
(`training.max_tokens_per_micro_batch`, whole batch and within the driver's chunks), bf16 autocast and torch.compile.
All variants run in one process, interleaved, `--repeats` times; figures are medians (the machine is shared, so
absolute numbers are noisy; the ratios within one run are the figure to read). Prints
    RESULT train_tokens_per_s variant=V tokens_per_s=X vs=BASELINE ratio=R forward_passes=N padded_tokens=P ...
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from contract.sample import Sample
from contract.spec import JobSpec, TrainingSpec
from workers.datasets import generate_rows
from workers.local import IterationRecord, train_local
from workers.models import build_tiny_model, count_parameters
from workers.training.batch import padded_tokens, sequence_length, token_budget_batches
from workers.training.sft import SFTResult, sft_warm_start
from workers.training.trainer import Trainer


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--digits", type=int, default=1, help="arithmetic operand digits")
    parser.add_argument("--ops", default="+")
    parser.add_argument("--sft-steps", type=int, default=300, help="SFT step limit")
    parser.add_argument("--sft-target-loss", type=float, default=0.55, help="stop SFT once its running loss is below")
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--iterations", type=int, default=160)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per RL iteration")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--warmup", type=int, default=0, help="lr warmup iterations")
    parser.add_argument("--kl-coef", type=float, default=0.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=5)
    parser.add_argument("--eval-prompts", type=int, default=128)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest when shared)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sft-model", type=Path, default=None, help="skip model build + SFT: RL from this model")
    parser.add_argument("--out", type=Path, default=None, help="keep models/checkpoints here (default: a temp dir)")
    parser.add_argument("--throughput", action="store_true", help="measure trainer tokens/s variants instead")
    parser.add_argument("--budgets", default="1024,2048,4096", help="--throughput: token budgets to try")
    parser.add_argument("--micro-batch", type=int, default=16, help="--throughput: samples per padded chunk")
    parser.add_argument("--repeats", type=int, default=5, help="--throughput: interleaved repeats (median)")
    parser.add_argument("--no-compile", action="store_true", help="--throughput: skip the torch.compile variant")
    return parser.parse_args()


def run(args: argparse.Namespace, work: Path) -> None:
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    if args.sft_model is not None:
        sft = SFTResult(args.sft_model, 0, float("nan"), 0.0)
    else:
        base = build_tiny_model(args.preset, work / "base", seed=args.seed)
        params = count_parameters(AutoModelForCausalLM.from_pretrained(base))
        print(f"model {args.preset}: {params / 1e6:.2f}M parameters")
        sft_rows = generate_rows("arithmetic", 4000, 1000 + args.seed, digits=args.digits, ops=args.ops)
        sft = sft_warm_start(
            base,
            work / "sft",
            sft_rows,
            steps=args.sft_steps,
            lr=args.sft_lr,
            batch_size=64,
            seed=args.seed,
            target_loss=args.sft_target_loss,
            log_every=50,
        )
        print(f"sft: {sft.steps} steps, final loss {sft.final_loss:.3f}, {sft.seconds:.1f}s")
    spec = JobSpec.model_validate(
        {
            "name": "bench-learn",
            "model": str(sft.model_dir),
            "dataset": {"builtin": "arithmetic", "num_prompts": 2048, "eval_prompts": args.eval_prompts},
            "reward": {"type": "exact_match"},
            "algorithm": {"name": "grpo", "group_size": args.group_size, "kl_coef": args.kl_coef},
            "generation": {
                "temperature": args.temperature,
                "max_tokens": args.max_tokens,
                "batch_size": args.prompts * args.group_size,
            },
            "training": {
                "iterations": args.iterations,
                "prompts_per_iteration": args.prompts,
                "micro_batch_size": args.prompts * args.group_size,
                "lr": args.lr,
            },
            "checkpoint": {"interval": args.iterations, "keep": 1},
            "seed": args.seed,
        }
    )
    rl_started = time.perf_counter()

    def show(record: IterationRecord) -> None:
        print(record.line(), flush=True)

    result = train_local(
        spec,
        work / "rl",
        eval_every=args.eval_every,
        on_iteration=show,
        dataset_params={"digits": args.digits, "ops": args.ops},
        warmup_steps=args.warmup,
    )
    rl_seconds = time.perf_counter() - rl_started
    print("held-out reward curve (iteration: reward):")
    for iteration, value in result.eval_curve:
        print(f"  {iteration:4d}: {value:.3f} " + "#" * round(value * 50))
    start, end = result.eval_curve[0][1], result.eval_curve[-1][1]
    best_at, best = max(result.eval_curve, key=lambda point: point[1])  # the first iteration at the highest reward
    print_training_signals(result.records, spec.training.grad_clip)
    print(
        f"RESULT reward_start={start:.3f} reward_end={end:.3f} gain={end - start:.3f} reward_best={best:.3f} "
        f"best_iteration={best_at} reward_final={end:.3f} final_minus_best={end - best:.3f} "
        f"seconds={time.perf_counter() - started:.1f} sft_seconds={sft.seconds:.1f} rl_seconds={rl_seconds:.1f}"
    )


def print_training_signals(records: list[IterationRecord], grad_clip: float, window: int = 20) -> None:
    """Means of the training signals per `window` iterations (training reward, entropy, clip fraction, grad norm
    and the share of steps whose grad norm exceeded the clip, mismatch KL): what to read beside the held-out curve."""
    print(f"training signals per {window} iterations (means):")
    for start in range(0, len(records), window):
        part = records[start : start + window]

        def mean(key: str, part: list[IterationRecord] = part) -> float:
            values = [float(r.metrics[key]) for r in part if r.metrics.get(key) is not None]
            return statistics.fmean(values) if values else float("nan")

        over = sum(1 for r in part if float(r.metrics.get("grad_norm") or 0.0) > grad_clip) / len(part)
        print(f"  {part[0].iteration:4d}-{part[-1].iteration:4d}: reward={mean('reward_mean'):.3f} "
              f"entropy={mean('entropy'):.3f} clip_frac={mean('clip_frac'):.3f} grad_norm={mean('grad_norm'):.2f} "
              f"grad_max={max(float(r.metrics.get('grad_norm') or 0.0) for r in part):.1f} "
              f"grad_clipped_steps={over:.2f} mismatch_kl={mean('mismatch_kl'):.2e} "
              f"flat_groups={mean('reward_flat_groups'):.2f}")


def long_tail_samples(model_dir: Path, n_prompts: int, group_size: int, seed: int) -> list[Sample]:
    """Scored samples as the engine would return them, groups in a random (arrival) order: `long_tail` prompts,
    responses of the pattern repeated around the prompt's count (heavy-tailed lengths, varying within a group) plus
    eos, uniform behaviour logprobs, random 0/1 rewards."""
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rng = random.Random(seed)
    rows = generate_rows("long_tail", n_prompts, seed)
    rng.shuffle(rows)
    samples = []
    for row in rows:
        prompt_ids = tokenizer(row["prompt"])["input_ids"]
        for index in range(group_size):
            repeats = max(1, row["k"] + rng.randint(-row["k"] // 2, row["k"] // 2))
            response = tokenizer(row["pattern"] * repeats, add_special_tokens=False)["input_ids"]
            response.append(tokenizer.eos_token_id)
            samples.append(
                Sample(
                    job_id=0,
                    prompt_id=row["prompt_id"],
                    group_id=row["prompt_id"],
                    sample_id=f"{row['prompt_id']}-{index}",
                    policy_version=0,
                    prompt_ids=prompt_ids,
                    response_ids=response,
                    behaviour_logprobs=[-4.0] * len(response),
                    finish_reason="stop",
                    reward=float(rng.random() < 0.5),
                )
            )
    return samples


def chunks(items: list[Sample], size: int) -> list[list[Sample]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def forward_passes(samples: list[Sample], training: TrainingSpec, streaming: bool) -> list[list[int]]:
    """The sequence lengths of each forward pass the trainer runs (to report the padded-token cost).
    streaming: `micro_step` per arrival-order chunk of `micro_batch_size` (the sync/async driver); else
    `train_iteration` on the whole batch (colocated / train-local)."""
    budget, size = training.max_tokens_per_micro_batch, training.micro_batch_size
    if not streaming:
        if budget is None:
            return chunks_of_lengths(sorted(sequence_length(s) for s in samples), size)
        return forward_passes_in(samples, budget, size)
    passes: list[list[int]] = []
    for chunk in chunks(samples, size):
        lengths = [sequence_length(s) for s in chunk]
        passes += [lengths] if budget is None else forward_passes_in(chunk, budget, size)
    return passes


def chunks_of_lengths(lengths: list[int], size: int) -> list[list[int]]:
    return [lengths[start : start + size] for start in range(0, len(lengths), size)]


def forward_passes_in(samples: list[Sample], budget: int, size: int) -> list[list[int]]:
    lengths = [sequence_length(s) for s in samples]
    return [[lengths[i] for i in cut] for cut in token_budget_batches(lengths, budget, size)]


def throughput(args: argparse.Namespace, work: Path) -> None:
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    model_dir = build_tiny_model(args.preset, work / "base", seed=args.seed)
    samples = long_tail_samples(model_dir, args.prompts, args.group_size, args.seed)
    lengths = [sequence_length(s) for s in samples]
    tokens = sum(len(s.response_ids) for s in samples)
    print(
        f"model {args.preset}; {len(samples)} samples, sequence lengths min {min(lengths)} median "
        f"{statistics.median(lengths):.0f} max {max(lengths)}; {tokens} response tokens; {sum(lengths)} real tokens, "
        f"{padded_tokens(lengths)} padded to the longest"
    )

    def spec(**training: object) -> JobSpec:
        base = {"prompts_per_iteration": args.prompts, "micro_batch_size": len(samples), "lr": 1e-6}
        return JobSpec.model_validate(
            {
                "model": str(model_dir),
                "dataset": {"builtin": "long_tail"},
                "algorithm": {"name": "grpo", "group_size": args.group_size},
                "training": {**base, **training},
                "seed": args.seed,
            }
        )

    budgets = [int(b) for b in args.budgets.split(",") if b]
    best, mbs = budgets[len(budgets) // 2], args.micro_batch
    # name -> (spec, streaming); "padded" is what the RL run above does (one micro-batch of every sample)
    variants: dict[str, tuple[JobSpec, bool]] = {"padded": (spec(), False)}
    variants |= {f"budget{b}": (spec(max_tokens_per_micro_batch=b), False) for b in budgets}
    variants[f"sorted_mbs{mbs}"] = (spec(micro_batch_size=mbs), False)
    variants[f"stream_mbs{mbs}"] = (spec(micro_batch_size=mbs), True)
    variants[f"stream_mbs{mbs}_budget{best}"] = (spec(micro_batch_size=mbs, max_tokens_per_micro_batch=best), True)
    variants[f"budget{best}_bf16"] = (spec(max_tokens_per_micro_batch=best, bf16_autocast=True), False)
    if not args.no_compile:
        variants[f"budget{best}_compile"] = (spec(max_tokens_per_micro_batch=best, torch_compile=True), False)
    trainers = {name: Trainer(model_dir, variant) for name, (variant, _) in variants.items()}

    def one_iteration(name: str) -> float:
        trainer, (variant, streaming) = trainers[name], variants[name]
        started = time.perf_counter()
        if streaming:  # as the sync/async driver: advantages per complete group, micro-steps on arrival chunks
            advantages = trainer.algorithm.batch_advantages(samples)
            for start in range(0, len(samples), variant.training.micro_batch_size):
                stop = start + variant.training.micro_batch_size
                trainer.micro_step(samples[start:stop], advantages[start:stop])
            trainer.optimizer_step()
        else:
            trainer.train_iteration(samples)
        return time.perf_counter() - started

    for name in trainers:  # warm-up (compilation, allocator) outside the timing
        print(f"warm-up {name}: {one_iteration(name) + one_iteration(name):.1f}s for 2 iterations", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in trainers}
    for repeat in range(args.repeats):
        for name in trainers:
            seconds[name].append(one_iteration(name))
        print(f"repeat {repeat}: " + " ".join(f"{n}={s[-1]:.2f}s" for n, s in seconds.items()), flush=True)
    rates = {name: tokens / statistics.median(times) for name, times in seconds.items()}
    for name, rate in rates.items():
        variant, streaming = variants[name]
        passes = forward_passes(samples, variant.training, streaming)
        baseline = f"stream_mbs{mbs}" if streaming else "padded"
        print(
            f"RESULT train_tokens_per_s variant={name} tokens_per_s={rate:.0f} vs={baseline} "
            f"ratio={rate / rates[baseline]:.2f} median_s={statistics.median(seconds[name]):.3f} "
            f"forward_passes={len(passes)} padded_tokens={sum(padded_tokens(p) for p in passes)} "
            f"real_tokens={sum(lengths)} repeats={args.repeats} preset={args.preset} threads={args.threads}"
        )


def main() -> None:
    args = parse_args()
    if args.throughput:
        with tempfile.TemporaryDirectory(prefix="streamrl-throughput-") as tmp:
            throughput(args, Path(tmp))
        return
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        run(args, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="streamrl-learn-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
