"""Built-in task `long_tail`: `rep 3 ab:` -> `ababab`, with heavy-tailed answer lengths.

The repeat count k follows a discrete Pareto law, k = floor(k_min * U^(-1/alpha)) capped at `max_k`, so most answers
are short and a few are long: with the defaults the longest answers are ~10-20x the median (what skew-aware
dispatch acts on). The pattern is 1..`max_pattern` lowercase letters.
"""

from __future__ import annotations

import random
import string


def draw_k(rng: random.Random, *, alpha: float, k_min: int, max_k: int) -> int:
    u = 1.0 - rng.random()  # (0, 1]
    return min(max_k, int(k_min * u ** (-1.0 / alpha)))


def generate_rows(n: int, seed: int = 0, *, alpha: float = 1.1, k_min: int = 2, max_k: int = 32,
                  max_pattern: int = 3, split: str = "train") -> list[dict]:
    """`n` rows `{"prompt", "answer", "prompt_id", "task", "k", "pattern"}`; deterministic in (n, seed, params)."""
    if alpha <= 0 or k_min < 1 or max_k < k_min or max_pattern < 1:
        raise ValueError("long_tail: need alpha > 0, k_min >= 1, max_k >= k_min, max_pattern >= 1 "
                         f"(got alpha={alpha}, k_min={k_min}, max_k={max_k}, max_pattern={max_pattern})")
    if n < 0:
        raise ValueError(f"long_tail: n must be >= 0 (got {n})")
    rng = random.Random(f"long_tail:{split}:{seed}")
    rows = []
    for i in range(n):
        k = draw_k(rng, alpha=alpha, k_min=k_min, max_k=max_k)
        pattern = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, max_pattern)))
        rows.append({"prompt": f"rep {k} {pattern}:", "answer": pattern * k,
                     "prompt_id": f"long_tail-{split}-{seed}-{i}", "task": "long_tail", "k": k, "pattern": pattern})
    return rows
