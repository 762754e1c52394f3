"""A real model size: a Qwen2.5-0.5B-shaped model trained with LoRA through the platform (async) and with TRL's
GRPOTrainer on the same model and settings. `bench/peer_trl.py --preset qwen-0.5b` runs this.

    python bench/qwen_0p5b.py [--steps 2 --prompts 2 --group 4 --max-tokens 32 --modes async --rank 16]

Model: Qwen2.5-0.5B's configuration (24 layers, hidden 896, 14 query / 2 key-value heads, MLP 4864, vocabulary
151,936, tied embeddings, rope theta 1e6; 494M parameters), weights initialised locally (seeded, nothing
downloaded), stored in bfloat16 like the released checkpoint; the tokenizer is the project's character tokenizer
(built locally; its ids are the first of the vocabulary; a randomly initialised model samples the rest too, which
decode to nothing). Untrained, every sample runs to --max-tokens, so this measures throughput and memory, not
learning. Task: long_tail prompts, exact-match reward.
- the platform: `streamrl up` (peer_trl.PlatformRun: API, controller, a generation worker on core 0 and a training
  worker on core 1), a LoRA job (every linear layer, rank --rank) in each of --modes with the job spec's defaults for
  everything else (the choices the job made are printed from its events); seconds per iteration over iterations
  2..N (iteration 1 carries start-up).
- TRL: GRPOTrainer with the same LoRA (peft), batch, group, max tokens, lr; torch on all cores; seconds per step =
  train() wall time / steps (includes its first step).
Peak memory: each process's peak resident set (VmHWM) read just before it ends (the platform's processes by role).
Last line: `RESULT qwen05b trl_s_per_it=... <mode>_s_per_it=... trl_peak_rss_mib=... <mode>_<role>_peak_rss_mib=...`.

Measured (2 CPU cores shared with other helpers' work, load average 10-18, one run each, so only the order of
magnitude is solid; 3 iterations x 2 prompts x 4 samples, 32 tokens, LoRA rank 16 on every linear layer):
`RESULT qwen05b trl_s_per_it=644.65 trl_peak_rss_mib=3785 async_s_per_it=71.42 async_api_peak_rss_mib=191
async_generation_peak_rss_mib=3441 async_training_peak_rss_mib=5602` (the platform's iterations 118.5, 69.6, 73.3 s;
TRL's figure includes its first step, and TRL's defaults checkpoint gradients). The job's defaults chose: token
budget 2048 a micro-batch (494M parameters, 2494 KiB of activations per token, 12 GiB free), float32 training (bf16
matmuls are slower on this CPU), 1 thread; the frozen base weights mapped from one shared file (1885 MiB, float32);
generation drains at weight updates (hf's partial_rollouts default); speculation off (`auto` was off then; it is
group now, paced: drafts a randomly initialised model never accepts would make every step a plain one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from peer_trl import TRL_SCRIPT, PlatformRun, trl_site  # noqa: E402

# Qwen/Qwen2.5-0.5B config.json (token ids follow the local tokenizer instead)
QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, vocab_size=151_936, hidden_act="silu", use_sliding_window=False,
                  sliding_window=32768, max_window_layers=24, attention_dropout=0.0, initializer_range=0.02)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_qwen_05b(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from workers.models.tokenizer import build_char_tokenizer, char_vocab

    vocab = char_vocab()
    config = Qwen2Config(**QWEN25_05B, bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"],
                         pad_token_id=vocab["<pad>"])
    torch.manual_seed(seed)
    model: Any = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    build_char_tokenizer().save_pretrained(out)
    print(f"Qwen2.5-0.5B-shaped model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, "
          f"bfloat16, {sum(f.stat().st_size for f in out.glob('*.safetensors')) / 2**20:.0f} MiB on disk", flush=True)
    return out


def peak_rss_by_role(run: PlatformRun) -> dict[str, float]:
    """MiB: the highest VmHWM of the `streamrl up` process group's processes, by role (api, controller, generation
    and training workers, the job processes they start)."""
    import psutil

    peaks: dict[str, float] = {}
    try:
        procs = [psutil.Process(run.proc.pid), *psutil.Process(run.proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return peaks
    for proc in procs:
        try:
            cmd = " ".join(proc.cmdline())
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except (psutil.Error, OSError):
            continue
        hwm = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM")), 0.0)
        role = ("training" if "training" in cmd else "generation" if "generation" in cmd else
                "api" if "uvicorn" in cmd or "api" in cmd.split() else "up" if " up " in cmd else
                "redis" if "redis" in cmd else cmd.split()[-1][:20].replace(" ", "_") or "other")
        peaks[role] = max(peaks.get(role, 0.0), hwm)
    return peaks


def run_platform(mode: str, args: argparse.Namespace, base: Path, train_file: Path, work: Path) -> dict[str, Any]:
    run = PlatformRun(work / f"platform-{mode}", "0", f"1-{max(1, args.cores - 1)}" if args.cores > 1 else "0")
    peaks: dict[str, float] = {}
    try:
        with run.client() as api:
            dataset = run.stage(api, base, "qwen05b", train_file)
            spec = {"name": f"qwen05b-{mode}", "model": "qwen05b", "mode": mode, "seed": args.seed,
                    "dataset": {"id": dataset["id"], "eval_prompts": 0}, "reward": {"type": "exact_match"},
                    "algorithm": {"name": "grpo", "group_size": args.group, "kl_coef": 0.0},
                    "generation": {"instances": 1, "batch_size": args.prompts * args.group,
                                   "max_tokens": args.max_tokens, "temperature": 1.0},
                    "training": {"iterations": args.steps, "prompts_per_iteration": args.prompts,
                                 "micro_batch_size": args.prompts * args.group, "lr": args.lr, "eval_every": 0,
                                 "lora": {"rank": args.rank, "alpha": 2.0 * args.rank,
                                          "target_modules": LORA_TARGETS}},
                    "checkpoint": {"interval": args.steps}}
            job = api.submit_job(spec)
            deadline = time.time() + args.timeout
            while time.time() < deadline:  # peaks while the job's processes are alive
                done = api._json("GET", f"/jobs/{job['id']}")
                for role, mib in peak_rss_by_role(run).items():
                    peaks[role] = max(peaks.get(role, 0.0), mib)
                if done["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(2.0)
            if done["status"] != "succeeded":
                raise RuntimeError(f"platform {mode}: job {done['status']}: {done.get('error')}")
            rows = [r["metrics"] for r in api.job_iterations(job["id"], limit=10_000)["data"]]
            events = api.job_events(job["id"], limit=1000)["data"]
    finally:
        run.stop()
    steady = rows[1:] or rows
    chosen = [f"{e.get('kind', e.get('type'))}: {e.get('message')}" for e in events
              if any(w in str(e.get("kind", e.get("type"))) for w in ("default", "partial", "speculat", "sharing"))]
    return {"s_per_it": sum(r["iteration_seconds"] for r in steady) / len(steady),
            "first_s": rows[0]["iteration_seconds"], "peaks": peaks, "chosen": chosen,
            "iterations": [round(r["iteration_seconds"], 1) for r in rows]}


def run_trl(args: argparse.Namespace, base: Path, train_file: Path, work: Path) -> dict[str, Any]:
    python, env = trl_site(args.trl_site)
    cfg = {"model": str(base), "data": str(train_file), "out": str(work / "trl"), "lr": args.lr, "steps": args.steps,
           "prompts": args.prompts, "group": args.group, "max_tokens": args.max_tokens, "seed": args.seed,
           "threads": args.cores, "bf16": False, "lora": {"r": args.rank, "lora_alpha": 2 * args.rank,
                                                          "target_modules": LORA_TARGETS}}
    script = work / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    done = subprocess.run([str(python), str(script), json.dumps(cfg)], capture_output=True, text=True,
                          timeout=args.timeout, env={**os.environ, **env, "TOKENIZERS_PARALLELISM": "false"})
    line = next((x for x in done.stdout.splitlines() if x.startswith("TRL_RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"TRL run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(line.removeprefix("TRL_RESULT "))
    return {"s_per_it": result["seconds"] / args.steps, "peak_rss_mib": result["peak_rss_mib"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="async")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=3000.0)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--trl-site", type=Path, default=Path(tempfile.gettempdir()) / "streamrl-trl-site")
    args = parser.parse_args(argv)

    from workers.datasets import write_jsonl
    from workers.datasets.long_tail import generate_rows

    with tempfile.TemporaryDirectory(prefix="streamrl-qwen05b-") as tmp:
        work = Path(tmp)
        base = build_qwen_05b(work / "model", seed=args.seed)
        train_file = work / "train.jsonl"
        write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in generate_rows(64, seed=1, split="train")],
                    train_file)
        print(f"{args.steps} iterations x {args.prompts} prompts x {args.group} samples, max_tokens {args.max_tokens},"
              f" LoRA rank {args.rank}, {args.cores} cores", flush=True)
        figures = []
        for mode in args.modes.split(","):
            result = run_platform(mode, args, base, train_file, work)
            peaks = json.dumps({k: round(v) for k, v in result["peaks"].items()})
            print(f"platform {mode}: {result['s_per_it']:.1f} s/iteration (iterations 2..N; per iteration "
                  f"{result['iterations']}), peak RSS MiB {peaks}", flush=True)
            for line in result["chosen"]:
                print(f"  chosen: {line}", flush=True)
            figures.append(f"{mode}_s_per_it={result['s_per_it']:.2f}")
            figures += [f"{mode}_{role}_peak_rss_mib={mib:.0f}" for role, mib in sorted(result["peaks"].items())
                        if role in ("training", "generation", "api", "up")]
        if not args.skip_trl:
            trl = run_trl(args, base, train_file, work)
            print(f"TRL GRPOTrainer: {trl['s_per_it']:.1f} s/iteration, peak RSS {trl['peak_rss_mib']:.0f} MiB",
                  flush=True)
            figures = [f"trl_s_per_it={trl['s_per_it']:.2f}", f"trl_peak_rss_mib={trl['peak_rss_mib']:.0f}", *figures]
    print("RESULT qwen05b " + " ".join(figures))


if __name__ == "__main__":
    main()
