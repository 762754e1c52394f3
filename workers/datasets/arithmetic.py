"""Built-in task `arithmetic`: prompts like `12+35=` with answer `47`.

Difficulty: `digits` (operand size, 1..6) and `ops` (any of "+-*"). With `allow_negative=False` (default) a
subtraction puts the larger operand first, so answers are non-negative integers written in decimal.
"""

from __future__ import annotations

import random

OPS = "+-*"


def solve(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_row(rng: random.Random, *, digits: int, ops: str, allow_negative: bool) -> dict:
    low = 0 if digits == 1 else 10 ** (digits - 1)
    a, b = rng.randint(low, 10**digits - 1), rng.randint(low, 10**digits - 1)
    op = rng.choice(ops)
    if op == "-" and not allow_negative and b > a:
        a, b = b, a
    return {"prompt": f"{a}{op}{b}=", "answer": str(solve(a, op, b)), "task": "arithmetic", "digits": digits}


def generate_rows(n: int, seed: int = 0, *, digits: int = 2, ops: str = "+", allow_negative: bool = False,
                  split: str = "train") -> list[dict]:
    """`n` rows `{"prompt", "answer", "prompt_id", "task", "digits"}`; the same (n, seed, params) give the same rows."""
    if not 1 <= digits <= 6:
        raise ValueError(f"arithmetic: digits must be in 1..6 (got {digits})")
    if not ops or set(ops) - set(OPS):
        raise ValueError(f"arithmetic: ops must be a non-empty subset of {OPS!r} (got {ops!r})")
    if n < 0:
        raise ValueError(f"arithmetic: n must be >= 0 (got {n})")
    rng = random.Random(f"arithmetic:{split}:{seed}")
    rows = [make_row(rng, digits=digits, ops=ops, allow_negative=allow_negative) for _ in range(n)]
    for i, row in enumerate(rows):
        row["prompt_id"] = f"arithmetic-{split}-{seed}-{i}"
    return rows
