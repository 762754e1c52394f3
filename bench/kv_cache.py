"""hf engine decode: a KV cache with spare columns (the default) vs one copied at every step (DynamicLayer's way).

transformers' DynamicLayer appends each decode step's column with torch.cat, so every step copies the whole cache;
workers/generation/engines/kv_columns.py writes the column into spare columns in place. Both arms run the same
continuous batching (hf_batch.py) on the same requests; the baseline is the same layer with no spare columns, which
allocates and copies the cache at every step exactly as torch.cat does.

Workload: `--requests` prompts of the long_tail task, each run to its own length (EOS ignored): lengths heavy-tailed,
16 * Pareto(1.2) tokens capped at `--max-tokens`, the same for both arms. The requests are fed continuously, so the
batch keeps long rows while short ones churn through it (the shape of async generation with in-flight updates).

    python bench/kv_cache.py [--preset tiny-1m] [--batch 64] [--requests 256] [--max-tokens 512] [--rounds 3]
                             [--threads 1] [--device cpu]
Final line: RESULT kv_spare_over_copy=<tokens/s ratio, median of interleaved rounds> spare_tok_s=.. copy_tok_s=..
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from workers.datasets import generate_rows  # noqa: E402
from workers.generation.engine import GenerationRequest, SamplingParams  # noqa: E402
from workers.generation.engines.hf import HFEngine  # noqa: E402
from workers.generation.engines.kv_columns import MIN_SPARE, SPARE_DIVISOR  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402

ARMS: dict[str, tuple[int, int | None]] = {"spare": (MIN_SPARE, SPARE_DIVISOR), "copy": (0, None)}


def workload(engine: HFEngine, n: int, max_tokens: int) -> list[GenerationRequest]:
    rng = random.Random(0)
    rows = generate_rows("long_tail", n, seed=0)
    lengths = [min(max_tokens, int(16 * rng.paretovariate(1.2))) for _ in rows]
    return [GenerationRequest(str(i), engine.encode(r["prompt"]), SamplingParams(temperature=0, max_tokens=n))
            for i, (r, n) in enumerate(zip(rows, lengths, strict=True))]


def run(engine: HFEngine, requests: list[GenerationRequest], spare: tuple[int, int | None]) -> float:
    """Tokens/s of one pass of `requests` through a fresh batcher with these spare columns."""
    t0 = time.perf_counter()
    tokens = sum(len(r.response_ids) for r in engine._batcher(kv_spare=spare).run(requests))
    return tokens / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(args.preset, Path(tmp) / "model", seed=0)
        engine = HFEngine(model_dir, max_batch_size=args.batch, device=args.device, ignore_eos=True)
        requests = workload(engine, args.requests, args.max_tokens)
        lengths = sorted(r.sampling.max_tokens for r in requests)
        print(f"{len(requests)} requests, tokens p50={lengths[len(lengths) // 2]} max={lengths[-1]} "
              f"total={sum(lengths)}; batch {args.batch}, {args.preset}, {args.device}", flush=True)
        run(engine, requests[:8], ARMS["spare"])  # warm-up
        measured: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for round_ in range(args.rounds):
            for arm, spare in ARMS.items():
                measured[arm].append(run(engine, requests, spare))
                print(f"round {round_ + 1} {arm:5s} {measured[arm][-1]:8.1f} tokens/s", flush=True)
    spare_tok_s, copy_tok_s = (statistics.median(measured[arm]) for arm in ("spare", "copy"))
    print(f"RESULT kv_spare_over_copy={spare_tok_s / copy_tok_s:.3f} spare_tok_s={spare_tok_s:.1f} "
          f"copy_tok_s={copy_tok_s:.1f} preset={args.preset} batch={args.batch} max_tokens={args.max_tokens} "
          f"rounds={args.rounds}")


if __name__ == "__main__":
    main()
