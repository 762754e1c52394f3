"""Learning benchmark: a ~1M-parameter tiny Llama, SFT warm start on arithmetic, then GRPO with `train_local`.

    python bench/learn.py                      # defaults tuned to finish in < 5 minutes on 2 (shared) CPU cores

Prints the SFT summary, one line per RL iteration, the held-out reward curve (mean exact-match reward of one seeded
sample per held-out prompt at the training temperature) and a final line
    RESULT reward_start=X reward_end=Y gain=G seconds=S sft_seconds=A rl_seconds=B
reward_start is measured on the SFT model before any RL step, reward_end after the last one; seconds covers
everything (model build, SFT, RL, evaluations).

Task choice: one-digit addition (`--digits 1`). A 1M model does not get past ~0% exact match on two-digit addition
within a minute of SFT on 2 shared cores, so RL would see no reward; on one digit, 100 SFT steps give a model with
the right format that is right ~35-45% of the time when sampled at temperature 1. Eval rows come from the task's
held-out split (different draws from train), but with one-digit operands there are only 100 distinct problems, so
held-out rows repeat problems seen in training: the curve measures the policy's reward, not generalisation.
GRPO lr 2e-4 (Adam): 1e-3 and above sharpened the policy onto wrong answers (entropy collapse) in our runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from contract.spec import JobSpec
from workers.datasets import generate_rows
from workers.local import IterationRecord, train_local
from workers.models import build_tiny_model, count_parameters
from workers.training.sft import SFTResult, sft_warm_start


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
        sft = sft_warm_start(base, work / "sft", sft_rows, steps=args.sft_steps, lr=args.sft_lr, batch_size=64,
                             seed=args.seed, target_loss=args.sft_target_loss, log_every=50)
        print(f"sft: {sft.steps} steps, final loss {sft.final_loss:.3f}, {sft.seconds:.1f}s")
    spec = JobSpec.model_validate({
        "name": "bench-learn",
        "model": str(sft.model_dir),
        "dataset": {"builtin": "arithmetic", "num_prompts": 2048, "eval_prompts": args.eval_prompts},
        "reward": {"type": "exact_match"},
        "algorithm": {"name": "grpo", "group_size": args.group_size, "kl_coef": args.kl_coef},
        "generation": {"temperature": args.temperature, "max_tokens": args.max_tokens,
                       "batch_size": args.prompts * args.group_size},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts,
                     "micro_batch_size": args.prompts * args.group_size, "lr": args.lr},
        "checkpoint": {"interval": args.iterations, "keep": 1},
        "seed": args.seed,
    })
    rl_started = time.perf_counter()

    def show(record: IterationRecord) -> None:
        print(record.line(), flush=True)

    result = train_local(spec, work / "rl", eval_every=args.eval_every, on_iteration=show,
                         dataset_params={"digits": args.digits, "ops": args.ops}, warmup_steps=args.warmup)
    rl_seconds = time.perf_counter() - rl_started
    print("held-out reward curve (iteration: reward):")
    for iteration, value in result.eval_curve:
        print(f"  {iteration:4d}: {value:.3f} " + "#" * round(value * 50))
    start, end = result.eval_curve[0][1], result.eval_curve[-1][1]
    print(f"RESULT reward_start={start:.3f} reward_end={end:.3f} gain={end - start:.3f} "
          f"seconds={time.perf_counter() - started:.1f} sft_seconds={sft.seconds:.1f} rl_seconds={rl_seconds:.1f}")


def main() -> None:
    args = parse_args()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        run(args, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="streamrl-learn-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
