"""Training memory of N LoRA jobs on one base model: a private base copy per process vs the host's shared copy vs
one shared training process.

    python bench/train_memory.py [--presets tiny-15m,tiny-100m] [--jobs 4] [--rounds 3] [--rank 16]
                                 [--disk-dtype bfloat16|float32] [--device cuda]

Each configuration starts --jobs training processes at once, as a training pool's prefork children would run N LoRA
jobs: each builds a `Trainer` (LoRA rank --rank, GRPO with its KL reference = the base with the adapter disabled)
and runs one iteration (forward, backward, AdamW), then holds still while the parent reads its memory.

  private   base_cache=None: each process keeps the base model from_pretrained gave it
  shared    base_cache=<dir>: frozen weights mapped from one file (workers/models/shared_base.py); the file is
            written by the first round's first job and reused after, as on a host that ran this base model before
  one_process  the shared file, and all --jobs trainers in ONE process, as a shared training process holds the
            drivers of several `training.share` jobs (workers/runtime/shared_training.py): one Python / torch
            runtime and one mapping instead of one per job

The model is saved in --disk-dtype (default bfloat16, as Hugging Face checkpoints ship) and trained in float32.
With a float32 checkpoint transformers already maps the weights file itself, so private processes share its pages
too; with a bfloat16 one every process converts to a private float32 copy, which is what the shared file replaces.

Memory is PSS (proportional set size, /proc/<pid>/smaps_rollup): a page shared by k processes counts 1/k in each, so
the sum over the processes is the memory they occupy together. Configurations alternate within each round (private,
shared, private, ...); figures are medians over --rounds. Per preset:

    RESULT preset=tiny-100m jobs=4 memory_ratio=<shared / private summed PSS> private_mib=... shared_mib=...
           saved_mib=... base_mib=... startup_ratio=<shared / private median Trainer build seconds>
    RESULT preset=tiny-100m jobs=4 one_process_over_shared=<one_process / shared summed PSS>
           one_process_over_private=... one_process_mib=...
    RESULT preset=tiny-100m device=cuda jobs=4 gpu_one_process_over_private=<one_process / private summed GPU
           memory allocated> gpu_private_mib=... gpu_one_process_mib=...    (--device cuda only)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, sys, time, torch
sys.path.insert(0, {tests!r})
from test_distributed import make_spec_kl, run_iterations
from workers.training.trainer import Trainer
torch.set_num_threads(1)
trainers, builds = [], []
for _ in range({count}):
    start = time.perf_counter()
    trainers.append(Trainer({model!r}, make_spec_kl(lora={lora!r}), {device!r}, base_cache={cache!r}))
    builds.append(time.perf_counter() - start)
    run_iterations(trainers[-1], 1)
gpu = torch.cuda.memory_allocated() if {device!r} != "cpu" else 0
print(json.dumps({{"build_s": builds, "gpu_bytes": gpu}}), flush=True)
sys.stdin.readline()
"""
CONFIGS = ("private", "shared", "one_process")


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Pss line for pid {pid}")


def run_config(model_dir: Path, jobs: int, lora: dict[str, object], cache: str | None,
               per_process: int = 1, device: str = "cpu") -> tuple[float, float, float]:
    """(summed PSS MiB, median build seconds, summed GPU MiB allocated) of `jobs` trainers alive at once,
    `per_process` in each process."""
    code = CHILD.format(tests=str(ROOT / "tests" / "training"), model=str(model_dir), lora=lora, cache=cache,
                        count=per_process, device=device)
    children = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for _ in range(jobs // per_process)]
    try:
        builds, gpu = [], 0
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline()
            if not line:
                raise RuntimeError("a training process died before its first iteration")
            builds.extend(json.loads(line)["build_s"])
            gpu += json.loads(line)["gpu_bytes"]
        total = sum(pss_kib(child.pid) for child in children) / 1024
    finally:
        for child in children:
            child.communicate("\n", timeout=120)
    return total, statistics.median(builds), gpu / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="tiny-15m,tiny-100m")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--disk-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the trainers on GPU 0, whose allocated "
                        "memory is summed too (host PSS is then the processes' host side)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from workers.models import build_tiny_model

    lora = {"rank": args.rank, "alpha": 2.0 * args.rank, "target_modules": None}
    with tempfile.TemporaryDirectory(prefix="train-memory-") as scratch:
        for preset in args.presets.split(","):
            model_dir = build_tiny_model(preset, Path(scratch) / preset, seed=0)
            if args.disk_dtype != "float32":
                on_disk = getattr(torch, args.disk_dtype)
                AutoModelForCausalLM.from_pretrained(model_dir, dtype=on_disk).save_pretrained(model_dir)
            cache = str(Path(scratch) / f"cache-{preset}")
            figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in CONFIGS}
            for round_index in range(args.rounds):
                for name in CONFIGS if round_index % 2 == 0 else CONFIGS[::-1]:
                    figures[name].append(run_config(model_dir, args.jobs, lora, None if name == "private" else cache,
                                                    per_process=args.jobs if name == "one_process" else 1,
                                                    device=args.device))
                    print(f"# {preset} round {round_index} {name}: {figures[name][-1][0]:.0f} MiB PSS, "
                          f"build {figures[name][-1][1]:.2f} s", flush=True)
            private, shared, one = (statistics.median(m for m, _, _ in figures[k]) for k in CONFIGS)
            build_private, build_shared = (statistics.median(b for _, b, _ in figures[k])
                                           for k in ("private", "shared"))
            gpu_private, gpu_one = (statistics.median(g for _, _, g in figures[k]) for k in ("private", "one_process"))
            base_mib = sum(p.stat().st_size for p in Path(cache).glob("*.bin")) / 2**20
            print(f"RESULT preset={preset} disk_dtype={args.disk_dtype} jobs={args.jobs} "
                  f"memory_ratio={shared / private:.3f} "
                  f"private_mib={private:.0f} shared_mib={shared:.0f} saved_mib={private - shared:.0f} "
                  f"base_mib={base_mib:.0f} startup_ratio={build_shared / build_private:.3f}", flush=True)
            print(f"RESULT preset={preset} disk_dtype={args.disk_dtype} jobs={args.jobs} "
                  f"one_process_over_shared={one / shared:.3f} one_process_over_private={one / private:.3f} "
                  f"one_process_mib={one:.0f}", flush=True)
            if args.device != "cpu":  # a GPU's memory is per process: only one process shares it (resident tensors)
                print(f"RESULT preset={preset} device={args.device} jobs={args.jobs} "
                      f"gpu_one_process_over_private={gpu_one / gpu_private:.3f} gpu_private_mib={gpu_private:.0f} "
                      f"gpu_one_process_mib={gpu_one:.0f}", flush=True)


if __name__ == "__main__":
    main()
