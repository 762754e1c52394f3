"""Per-token-latency profiling: PTL(BS) of a real engine, measured with a few probe batches.

Engines with a `profile_ptl(batch_sizes, tokens=...)` method (HFEngine) are asked directly (EOS ignored, exact token
counts); any other `GenerationEngine` is timed through `generate_stream` (seconds / longest response).
The profile is plain data (`contract.skew`: `ptl_to_json` / `ptl_from_json` store it with the job).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from contract.skew import PTLProfile, ptl_from_timings
from workers.generation.engine import GenerationEngine, GenerationRequest, SamplingParams


def measure_ptl(engine: GenerationEngine, batch_sizes: Iterable[int], *, tokens: int = 32, prompt_len: int = 8,
                repeats: int = 1) -> PTLProfile:
    """Profile `engine` at each batch size; the best of `repeats` runs (least disturbed by other load) is kept and
    the profile is made non-decreasing in batch size."""
    sizes = sorted({int(bs) for bs in batch_sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be >= 1, got {sizes}")
    best: dict[int, float] = {}
    for _ in range(max(1, repeats)):
        profile_fn = getattr(engine, "profile_ptl", None)
        timings = profile_fn(sizes, tokens=tokens, prompt_len=prompt_len) if callable(profile_fn) \
            else _time_stream(engine, sizes, tokens, prompt_len)
        for bs, s in timings.items():
            best[bs] = min(best.get(bs, float("inf")), s)
    # a decode step never gets cheaper with more sequences: a smaller batch measuring slower is noise
    for small, large in reversed(list(zip(sizes, sizes[1:], strict=False))):
        best[small] = min(best[small], best[large])
    return ptl_from_timings(best)


def _time_stream(engine: GenerationEngine, sizes: list[int], tokens: int, prompt_len: int) -> dict[int, float]:
    result = {}
    for bs in sizes:
        sampling = SamplingParams(temperature=0.0, max_tokens=tokens)
        requests = [GenerationRequest(f"ptl-{bs}-{i}", [1] * prompt_len, sampling) for i in range(bs)]
        start = time.perf_counter()
        longest = max(len(r.response_ids) for r in engine.generate_stream(requests))
        result[bs] = (time.perf_counter() - start) / max(1, longest)
    return result
