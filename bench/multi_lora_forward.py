"""The shared hf engine's two ways of adding 4 jobs' adapters in one batch: ops per decode step and seconds.

    python bench/multi_lora_forward.py [--preset tiny-15m] [--rounds 5] [--rows 128] [--max-tokens 16] [--rank 16]
                                       [--device cpu|cuda]

One `MultiLoraEngine` (workers/generation/engines/hf_multi_lora.py) with 4 adapters attached (random, trained-looking:
bench/multitenant.py's), --rows requests interleaved over the 4 adapters, every request run to --max-tokens (EOS
ignored). Three configurations on the same engine, interleaved per round:
  single       every row on adapter 0 (the plain peft forward: the cost of one adapter, the reference)
  per_adapter  the 4 adapters mixed, each adapter's low-rank product on its own rows (`stacked=False`)
  stacked      the 4 adapters mixed, all stacked: one A matmul, a row mask, one B matmul (the default)
Figures: ops per decode step (aten ops dispatched, counted with a TorchDispatchMode over one untimed run, divided by
the forward passes: on a GPU each is about one kernel launch, which is what bounds a small model's step there) and
the median over rounds of the run's seconds per decode step. Both mixed configurations must generate the same tokens
(greedy), which the bench checks.

    RESULT device=cpu ops_single=... ops_per_adapter=... ops_stacked=... step_ms_single=... step_ms_per_adapter=...
           step_ms_stacked=... stacked_over_per_adapter=<time ratio: < 1 is faster>
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ADAPTERS = 4
CONFIGS = ("single", "per_adapter", "stacked")


def count_ops(run: Any) -> int:
    """aten ops dispatched while `run()` runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            Counter.ops += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        run()
    return Counter.ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny-15m")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=128, help="requests per run, interleaved over the 4 adapters")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    if min(args.rounds, args.rows, args.max_tokens, args.rank) < 1:
        parser.error("every size must be >= 1")

    import torch
    from multitenant import make_adapters  # bench/, the script's directory
    from safetensors.torch import load_file

    from contract.spec import LoraSpec
    from workers.generation.engine import GenerationRequest, SamplingParams
    from workers.generation.engines.hf_multi_lora import MultiLoraEngine
    from workers.models import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="bench-multi-lora-") as tmp:
        model_dir = build_tiny_model(args.preset, Path(tmp) / "model", seed=0)
        adapters = make_adapters(model_dir, args.rank, Path(tmp))
        engine = MultiLoraEngine(model_dir, max_batch_size=args.rows, device=args.device, seed=0)
        engine.ignore_eos = True
        for job in range(ADAPTERS):
            engine.attach(f"job{job}", LoraSpec(rank=args.rank, alpha=2.0 * args.rank)).load_tensors(
                1, load_file(adapters[job][0]))
        prompt = engine.encode("12+35=")
        sampling = SamplingParams(temperature=0, max_tokens=args.max_tokens)

        def requests(config: str) -> list[Any]:
            return [GenerationRequest(str(i), prompt, sampling,
                                      adapter="job0" if config == "single" else f"job{i % ADAPTERS}")
                    for i in range(args.rows)]

        def run(config: str) -> dict[str, list[int]]:
            engine.stacked = config == "stacked"
            results = {r.request_id: r.response_ids for r in engine.generate_stream(requests(config))}
            if args.device == "cuda":
                torch.cuda.synchronize()
            return results

        tokens = {config: run(config) for config in CONFIGS}  # warm-up, and the tokens to compare
        if tokens["per_adapter"] != tokens["stacked"]:
            raise SystemExit("the stacked forward generated other tokens than the per-adapter one")
        steps = args.max_tokens  # one forward per token (the prompt's prefill is the first)
        ops = {config: count_ops(lambda c=config: run(c)) / steps for config in CONFIGS}
        seconds: dict[str, list[float]] = {config: [] for config in CONFIGS}
        for index in range(args.rounds):
            for config in CONFIGS:
                start = time.perf_counter()
                run(config)
                seconds[config].append((time.perf_counter() - start) / steps)
            print(f"round {index + 1}: " + " ".join(f"{c}={1000 * seconds[c][-1]:.1f}ms" for c in CONFIGS), flush=True)
        step_ms = {config: 1000 * statistics.median(values) for config, values in seconds.items()}
        print(f"RESULT device={args.device} preset={args.preset} rows={args.rows} rank={args.rank} "
              + " ".join(f"ops_{c}={ops[c]:.0f}" for c in CONFIGS) + " "
              + " ".join(f"step_ms_{c}={step_ms[c]:.2f}" for c in CONFIGS)
              + f" stacked_over_per_adapter={step_ms['stacked'] / step_ms['per_adapter']:.3f}")


if __name__ == "__main__":
    main()
