"""Per-token latency profiling for skew-aware dispatch: PTL(BS) = seconds per decode step at batch size BS."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from workers.generation.engine import GenerationRequest, SamplingParams


def profile_ptl(engine: Any, batch_sizes: Iterable[int], tokens: int = 32, prompt_len: int = 8,
                prompt_token: int = 1) -> dict[int, float]:
    """Run BS identical greedy requests of exactly `tokens` new tokens (EOS ignored) for each batch size.

    Works for any engine with `max_batch_size` and `ignore_eos` attributes (hf, vllm); both are restored after.
    The figure is wall time / tokens, so it includes the one prefill of the batch (small next to `tokens` steps).
    """
    saved = engine.max_batch_size, engine.ignore_eos
    result: dict[int, float] = {}
    try:
        engine.ignore_eos = True
        for bs in batch_sizes:
            if bs < 1:
                raise ValueError(f"batch sizes must be >= 1 (got {bs})")
            engine.max_batch_size = bs
            sampling = SamplingParams(temperature=0, max_tokens=tokens)
            requests = [GenerationRequest(f"ptl-{bs}-{i}", [prompt_token] * prompt_len, sampling) for i in range(bs)]
            start = time.perf_counter()
            for _ in engine.generate_stream(requests):
                pass
            result[bs] = (time.perf_counter() - start) / tokens
    finally:
        engine.max_batch_size, engine.ignore_eos = saved
    return result
