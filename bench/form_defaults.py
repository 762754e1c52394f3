"""Does a job from the submit form's defaults learn? (issue 39)

Builds the spec the dashboard's form posts with LoRA switched on (frontend/src/lib/jobForm.ts: the long-tail task,
its default reward with the length term, GRPO groups of 8, 32 new tokens, 8 prompts per iteration) with the
per-choice defaults of the registry (contract/form_defaults.py), and trains it on a freshly built tiny model (the
demo's) with train-local, the platform's driver in one process. As a control it runs the same spec with peft's
default targets (every linear layer, no output head), the setting that stayed flat.

    .venv/bin/python bench/form_defaults.py [--iterations 12] [--window 3]

Ends with `RESULT lora_rise=... lora_start=... lora_end=... no_head_rise=...`: the mean reward of the last `window`
iterations minus that of the first `window` (issue 39 asks >= 0.1 for the form's defaults). On a loaded 2-core host
an iteration takes about 10 s.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]


def form_reward_code() -> str:
    """The form's default reward, read from the dashboard's source (what the form posts)."""
    source = (REPO / "frontend" / "src" / "lib" / "jobForm.ts").read_text()
    found = re.search(r"DEFAULT_REWARD_CODE = `(.*?)`;", source, re.S)
    assert found, "DEFAULT_REWARD_CODE not found in jobForm.ts"
    return found.group(1)


def form_spec(model: Path, iterations: int, *, with_head: bool = True) -> dict[str, Any]:
    """The form's LoRA spec (DEFAULT_FORM with LoRA on), the registry's LoRA defaults applied."""
    from contract.form_defaults import FORM_DEFAULTS

    lora = FORM_DEFAULTS["lora"]
    targets = str(lora["training.lora.target_modules"]["value"]).split(", ")
    return {
        "name": "form-defaults", "model": str(model), "mode": "sync", "max_staleness": 1,
        "dataset": {"builtin": "long_tail", "num_prompts": 256},
        "reward": {"type": "python", "code": form_reward_code()},
        "algorithm": {"name": "grpo", "group_size": 8, "kl_coef": 0},
        "generation": {"engine": "hf", "instances": 2, "batch_size": 64, "max_tokens": 32, "temperature": 1.0},
        "training": {"devices": 1, "iterations": iterations, "prompts_per_iteration": 8,
                     "lr": lora["training.lr"]["value"],
                     "lora": {"rank": lora["training.lora.rank"]["value"],
                              "alpha": lora["training.lora.alpha"]["value"], "dropout": 0,
                              "target_modules": targets if with_head else None}},
        "dispatch": {"policy": "skew_aware"},
    }


def rise(model: Path, out: Path, iterations: int, window: int, *, with_head: bool) -> tuple[float, float, float]:
    from contract.spec import JobSpec
    from workers.local.run import train_local

    spec = JobSpec.model_validate(form_spec(model, iterations, with_head=with_head))
    result = train_local(spec, out, eval_every=0,
                         on_iteration=lambda r: print(f"  head={with_head} {r.line()}", flush=True))
    rewards = [r.reward for r in result.records]
    start, end = statistics.mean(rewards[:window]), statistics.mean(rewards[-window:])
    return end - start, start, end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--skip-control", action="store_true", help="only the form's defaults")
    args = parser.parse_args()
    from workers.models import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model("tiny-1m", Path(tmp) / "model", seed=0)
        lora_rise, start, end = rise(model, Path(tmp) / "lora", args.iterations, args.window, with_head=True)
        control = (float("nan") if args.skip_control else
                   rise(model, Path(tmp) / "no-head", args.iterations, args.window, with_head=False)[0])
    print(f"RESULT lora_rise={lora_rise:.3f} lora_start={start:.3f} lora_end={end:.3f} no_head_rise={control:.3f}")


if __name__ == "__main__":
    main()
