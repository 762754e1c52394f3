"""The platform against TRL's `GRPOTrainer` on the same GRPO run: same model, data, reward, hyperparameters and seed.

    python bench/peer_trl.py [--steps 30 --prompts 8 --group 8 --max-tokens 160 --lr 3e-4 --modes colocated,async]
                             [--bf16] [--token-budget N]   # default: the platform's defaults

Task: the built-in `long_tail` (`rep 3 ab:` -> `ababab`; Pareto-distributed answer lengths, so a few responses are
10-20x the median), exact-match reward, a tiny Llama SFT-warmed on the task to loss `--sft-loss` (at most
`--sft-seconds`) so the policy sometimes earns the reward. Both sides start from that checkpoint.
- the platform: `streamrl up` (embedded SQLite + Redis, the API, the controller, a generation and a training worker
  pinned to core sets: colocated on all cores, disaggregated split in half), driven through its REST API as a user
  would (register, model, dataset upload, job submit, poll); samples/s over iterations 2..N from its metrics.
- TRL: `GRPOTrainer` in a separate venv this script creates (`--trl-venv`, default /tmp/streamrl-trl-venv; TRL is
  not a project dependency) with torch using all cores; samples/s = steps x prompts x group / train() wall time.
`--preset qwen-0.5b` runs bench/qwen_0p5b.py instead (a Qwen2.5-0.5B-shaped model, LoRA, async, a few iterations;
seconds per iteration and peak memory per process; its own options follow).
Held-out reward: the same greedy evaluator (this process, hf generate) on `--eval-prompts` held-out prompts scores
the final weights of each run. Last line: `RESULT trl_samples_per_s=... <mode>_samples_per_s=... <mode>_over_trl=...
trl_heldout=... <mode>_heldout=...`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from processes import child_pythonpath  # noqa: E402  (bench/, the script's directory)

TRL_SCRIPT = textwrap.dedent('''
    import json, sys, time
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    cfg = json.loads(sys.argv[1])
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(cfg["threads"])
    rows = [json.loads(line) for line in open(cfg["data"])]
    answers = {r["prompt"]: r["answer"] for r in rows}
    data = Dataset.from_list([{"prompt": r["prompt"]} for r in rows])

    def exact_match(prompts, completions, **_):
        return [1.0 if c.strip() == answers[p].strip() else 0.0 for p, c in zip(prompts, completions)]

    tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
    args = GRPOConfig(
        output_dir=cfg["out"], learning_rate=cfg["lr"], max_steps=cfg["steps"], seed=cfg["seed"],
        per_device_train_batch_size=cfg["prompts"] * cfg["group"], num_generations=cfg["group"],
        gradient_accumulation_steps=1, max_completion_length=cfg["max_tokens"], temperature=1.0, top_p=1.0,
        beta=0.0, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=cfg["bf16"],
        dataloader_num_workers=0, num_iterations=1, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0)
    peft_config = None
    if cfg.get("lora"):
        from peft import LoraConfig
        peft_config = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **cfg["lora"])
    trainer = GRPOTrainer(model=model, args=args, reward_funcs=exact_match, train_dataset=data,
                          processing_class=tokenizer, peft_config=peft_config)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(cfg["out"] + "/final")
    tokenizer.save_pretrained(cfg["out"] + "/final")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("TRL_RESULT " + json.dumps({"seconds": seconds, "rewards": rewards, "peak_rss_mib": peak}))
''')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def trl_venv(path: Path) -> Path:
    python = path / "bin" / "python"
    if not python.exists() or subprocess.run([str(python), "-c", "import trl"], capture_output=True).returncode:
        print(f"creating the TRL venv at {path} (pip: torch==2.13.0, transformers<5.20, trl)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "transformers<5.20", "trl"],
                       check=True)
    return python


def trl_site(path: Path) -> tuple[Path, dict[str, str]]:
    """TRL for this project's own venv, without touching it: `pip install --target PATH --no-deps trl datasets
    multiprocess` (its other dependencies are the project's); returns (python, env adding PATH to PYTHONPATH)."""
    env = {"PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    if subprocess.run([sys.executable, "-c", "import trl, datasets"], capture_output=True,
                      env={**os.environ, **env}).returncode:
        print(f"installing TRL into {path} (pip --target, no dependencies: torch and transformers are the venv's)",
              flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(path), "--no-deps", "trl",
                        "datasets", "multiprocess"], check=True)
    return Path(sys.executable), env


def heldout_reward(model_dir: Path, rows: list[dict[str, Any]], max_tokens: int) -> float:
    """Greedy exact-match rate on held-out rows: the one evaluator for every run."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    hits = 0
    with torch.no_grad():
        for row in rows:
            ids = tokenizer(row["prompt"], return_tensors="pt").input_ids
            out = model.generate(ids, max_new_tokens=max_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            hits += text.strip() == row["answer"].strip()
    return hits / len(rows)


class PlatformRun:
    """`streamrl up` on a fresh data dir with the given device sets, stopped with SIGINT (its clean shutdown)."""

    def __init__(self, data_dir: Path, generation_devices: str, training_devices: str) -> None:
        self.data_dir, self.port = data_dir, _free_port()
        env = {**os.environ, "STREAMRL_DATA_DIR": str(data_dir), "HOME": str(data_dir / "home"),
               "PYTHONPATH": child_pythonpath(REPO), "STREAMRL_DEVICE": "cpu"}
        for name in ("STREAMRL_DATABASE_URL", "STREAMRL_REDIS_URL", "STREAMRL_URL"):
            env.pop(name, None)
        (data_dir / "home").mkdir(parents=True, exist_ok=True)
        self.log = open(data_dir / "up.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamrl.cli.main", "up", "--port", str(self.port), "--api-workers", "1",
             "--generation-devices", generation_devices, "--training-devices", training_devices],
            env=env, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        from backend.client import StreamRLClient

        deadline = time.time() + 180
        creds = self.data_dir / "admin.json"
        while time.time() < deadline and not creds.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamrl up exited: {(self.data_dir / 'up.log').read_text()[-2000:]}")
            time.sleep(0.5)
        admin = json.loads(creds.read_text())
        client = StreamRLClient(self.url)
        client.login(admin["email"], admin["password"])
        return client

    def stage(self, api: Any, model_dir: Path, name: str, train_file: Path) -> dict[str, Any]:
        """`model_dir` copied under the artifact dir and registered as `name`, `train_file` uploaded: the dataset."""
        models = self.data_dir / "artifacts" / "models"
        models.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-r", str(model_dir), str(models / name)], check=True)
        api.register_model(name, f"models/{name}")
        return dict(api.upload_dataset(train_file, name="long-tail-train"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def run_platform(mode: str, args: argparse.Namespace, base: Path, train_file: Path, work: Path) -> dict[str, Any]:
    cores = args.cores
    half = max(1, cores // 2)
    gen, train = ("0", f"0-{cores - 1}") if mode == "colocated" else (f"0-{half - 1}", f"{half}-{cores - 1}")
    run = PlatformRun(work / f"platform-{mode}", gen, train)
    try:
        with run.client() as api:
            dataset = run.stage(api, base, "peer", train_file)
            spec = {"name": f"peer-{mode}", "model": "peer", "mode": mode, "max_staleness": 1, "seed": args.seed,
                    "dataset": {"id": dataset["id"], "eval_prompts": 0}, "reward": {"type": "exact_match"},
                    "algorithm": {"name": "grpo", "group_size": args.group, "kl_coef": 0.0},
                    "generation": {"instances": 1, "batch_size": args.prompts * args.group,
                                   "max_tokens": args.max_tokens, "temperature": 1.0},
                    "training": {"iterations": args.steps, "prompts_per_iteration": args.prompts,
                                 "micro_batch_size": args.prompts * args.group, "lr": args.lr, "eval_every": 0,
                                 "bf16_autocast": True if args.bf16 else None,
                                 "max_tokens_per_micro_batch": args.token_budget},
                    "checkpoint": {"interval": args.steps}}
            job = api.submit_job(spec)
            done = api.wait_for_status(job["id"], timeout_s=args.timeout, poll_s=2.0)
            if done["status"] != "succeeded":
                raise RuntimeError(f"platform {mode}: job {done['status']}: {done.get('error')}")
            rows = [r["metrics"] for r in api.job_iterations(job["id"], limit=10_000)["data"]]
            checkpoint = api._json("GET", f"/jobs/{job['id']}/checkpoints")["data"][-1]["path"]
    finally:
        run.stop()
    steady = rows[1:] or rows
    seconds = sum(r["iteration_seconds"] for r in steady)
    final = work / f"platform-{mode}-final"
    subprocess.run(["cp", "-r", str(base), str(final)], check=True)
    subprocess.run(["cp", str(Path(checkpoint) / "model.safetensors"), str(final / "model.safetensors")], check=True)
    return {"samples_per_s": sum(r["samples"] for r in steady) / seconds, "final": final,
            "reward_first": rows[0]["reward_mean"], "reward_last": rows[-1]["reward_mean"]}


def run_trl(python: Path, args: argparse.Namespace, base: Path, train_file: Path, work: Path) -> dict[str, Any]:
    cfg = {"model": str(base), "data": str(train_file), "out": str(work / "trl"), "lr": args.lr, "steps": args.steps,
           "prompts": args.prompts, "group": args.group, "max_tokens": args.max_tokens, "seed": args.seed,
           "threads": args.cores, "bf16": args.bf16}
    script = work / "trl_grpo.py"
    script.write_text(TRL_SCRIPT)
    done = subprocess.run([str(python), str(script), json.dumps(cfg)], capture_output=True, text=True,
                          timeout=args.timeout, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    line = next((x for x in done.stdout.splitlines() if x.startswith("TRL_RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"TRL run failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(line.removeprefix("TRL_RESULT "))
    samples = args.steps * args.prompts * args.group
    return {"samples_per_s": samples / result["seconds"], "final": work / "trl" / "final",
            "reward_first": result["rewards"][0], "reward_last": result["rewards"][-1]}


def main() -> None:
    if "--preset" in sys.argv:
        at = sys.argv.index("--preset")
        preset = sys.argv[at + 1] if at + 1 < len(sys.argv) else ""
        if preset != "qwen-0.5b":
            raise SystemExit(f"--preset: only qwen-0.5b (got {preset!r}); without it: tiny-1m")
        from qwen_0p5b import main as qwen_main

        return qwen_main(sys.argv[1:at] + sys.argv[at + 2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="colocated,async", help="platform modes to run, comma-separated")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--sft-seconds", type=float, default=300.0, help="the SFT warm start's time cap")
    parser.add_argument("--sft-loss", type=float, default=0.3,
                        help="stop the SFT warm start at this loss (a fixed time budget on a loaded machine can leave "
                        "a policy that never earns the reward, and stops at once: its samples/s mean nothing)")
    parser.add_argument("--eval-prompts", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--bf16", action="store_true",
                        help="both sides train under bf16 autocast (the platform's training.bf16_autocast, TRL's bf16)")
    parser.add_argument("--token-budget", type=int, default=None,
                        help="the platform's padding-free micro-batches (training.max_tokens_per_micro_batch; 0: "
                             "off); default: the platform's own choice at job start. TRL has no equivalent and pads "
                             "every step's batch")
    parser.add_argument("--trl-venv", type=Path, default=Path(tempfile.gettempdir()) / "streamrl-trl-venv")
    args = parser.parse_args()
    python = trl_venv(args.trl_venv)

    from workers.datasets import write_jsonl
    from workers.datasets.long_tail import generate_rows
    from workers.models.tiny import build_tiny_model
    from workers.training.sft import sft_warm_start

    with tempfile.TemporaryDirectory(prefix="streamrl-peer-") as tmp:
        work = Path(tmp)
        rows = generate_rows(512, seed=1, split="train")
        held_out = generate_rows(args.eval_prompts, seed=1, split="eval")
        sft = sft_warm_start(build_tiny_model("tiny-1m", work / "init", seed=0), work / "base", rows,
                             steps=100_000, time_budget_s=args.sft_seconds, target_loss=args.sft_loss, seed=0)
        base = sft.model_dir
        print(f"SFT warm start: {sft.steps} steps, loss {sft.final_loss:.3f}", flush=True)
        train_file = work / "train.jsonl"
        write_jsonl([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows], train_file)
        start_reward = heldout_reward(base, held_out, args.max_tokens)
        print(f"start: held-out exact match {start_reward:.3f} ({args.eval_prompts} prompts)", flush=True)
        results = {"trl": run_trl(python, args, base, train_file, work)}
        for mode in args.modes.split(","):
            results[mode] = run_platform(mode, args, base, train_file, work)
        trl = results["trl"]["samples_per_s"]
        figures = []
        for name, result in results.items():
            result["heldout"] = heldout_reward(result["final"], held_out, args.max_tokens)
            ratio = result["samples_per_s"] / trl
            print(f"{name:10s} samples/s={result['samples_per_s']:7.2f} x TRL={ratio:5.2f} train reward "
                  f"{result['reward_first']:.3f}->{result['reward_last']:.3f} held-out {result['heldout']:.3f}",
                  flush=True)
            figures.append(f"{name}_samples_per_s={result['samples_per_s']:.2f}")
            if name != "trl":
                figures.append(f"{name}_over_trl={ratio:.2f}")
            figures.append(f"{name}_heldout={result['heldout']:.3f}")
    print("RESULT " + " ".join(figures) + f" start_heldout={start_reward:.3f}")


if __name__ == "__main__":
    main()
