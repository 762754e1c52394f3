"""Generation throughput: `hf` continuous batching vs plain padded `model.generate`, and `vllm` where installed.

Workload: the long_tail task (answer lengths heavy-tailed, longest ~16x the median) on a tiny-1m model, batch 64.
Each request is run for exactly its answer's length + 1 tokens (EOS ignored, max_tokens = target), so every engine
produces the same useful tokens and the comparison is pure scheduling: padded batches run until their longest member
finishes (the skew bubble), continuous batching refills a slot the moment a sequence finishes.
tokens/s = useful tokens / wall seconds (after one warm-up pass on a few requests).

    python bench/engine.py [--requests 256] [--batch 64] [--preset tiny-1m] [--threads 1] [--no-vllm]
Final line: RESULT hf_cb_tok_s=.. padded_tok_s=.. cb_over_padded=.. [vllm_tok_s=.. vllm_over_padded=..]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from workers.datasets import generate_rows  # noqa: E402
from workers.generation.engine import GenerationEngine, GenerationRequest, SamplingParams  # noqa: E402
from workers.generation.engines import setup_engine  # noqa: E402
from workers.generation.engines.hf import HFEngine  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402


def workload(engine: HFEngine, n: int) -> list[GenerationRequest]:
    rows = generate_rows("long_tail", n, seed=0)
    return [GenerationRequest(r["prompt_id"], engine.encode(r["prompt"]),
                              SamplingParams(temperature=0, max_tokens=len(r["answer"]) + 1)) for r in rows]


def run_stream(engine: GenerationEngine, requests: list[GenerationRequest]) -> tuple[int, float]:
    t0 = time.perf_counter()
    tokens = sum(len(r.response_ids) for r in engine.generate_stream(requests))
    return tokens, time.perf_counter() - t0


def run_padded(engine: HFEngine, requests: list[GenerationRequest], batch: int) -> tuple[int, float]:
    """Static batches of `batch` requests in arrival order, each generated to the batch's longest target."""
    t0 = time.perf_counter()
    tokens = 0
    for at in range(0, len(requests), batch):
        chunk = requests[at : at + batch]
        longest = max(r.sampling.max_tokens for r in chunk)
        engine.generate_padded([r.prompt_ids for r in chunk], SamplingParams(temperature=0, max_tokens=longest),
                               batch_size=batch)
        tokens += sum(r.sampling.max_tokens for r in chunk)  # useful tokens; the rest is padding work
    return tokens, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-vllm", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(args.preset, Path(tmp) / "model", seed=0)
        hf = setup_engine("hf", model_dir=model_dir, max_batch_size=args.batch, device=args.device, ignore_eos=True)
        assert isinstance(hf, HFEngine)
        requests = workload(hf, args.requests)
        lengths = sorted(r.sampling.max_tokens for r in requests)
        print(f"workload: {len(requests)} long_tail requests, target tokens p50={lengths[len(lengths) // 2]} "
              f"p90={lengths[int(0.9 * len(lengths))]} max={lengths[-1]} total={sum(lengths)}; batch {args.batch}")
        run_stream(hf, requests[:8])  # warm-up
        cb_tokens, cb_s = run_stream(hf, requests)
        pad_tokens, pad_s = run_padded(hf, requests, args.batch)
        assert cb_tokens == pad_tokens == sum(lengths)
        cb_tok_s, pad_tok_s = cb_tokens / cb_s, pad_tokens / pad_s
        print(f"hf continuous batching: {cb_tokens} tokens in {cb_s:.2f}s = {cb_tok_s:.0f} tok/s")
        print(f"hf padded generate:     {pad_tokens} tokens in {pad_s:.2f}s = {pad_tok_s:.0f} tok/s")
        result = f"hf_cb_tok_s={cb_tok_s:.1f} padded_tok_s={pad_tok_s:.1f} cb_over_padded={cb_tok_s / pad_tok_s:.2f}"

        if not args.no_vllm and importlib.util.find_spec("vllm") is not None:
            vllm = setup_engine("vllm", model_dir=model_dir, max_batch_size=args.batch, device=args.device,
                                ignore_eos=True, max_model_len=512)
            run_stream(vllm, requests[:8])
            v_tokens, v_s = run_stream(vllm, requests)
            v_tok_s = v_tokens / v_s
            print(f"vllm:                   {v_tokens} tokens in {v_s:.2f}s = {v_tok_s:.0f} tok/s")
            result += f" vllm_tok_s={v_tok_s:.1f} vllm_over_padded={v_tok_s / pad_tok_s:.2f}"
        else:
            print("vllm: not installed (scripts/install_vllm.sh), skipped")
    print(f"RESULT {result}")


if __name__ == "__main__":
    main()
