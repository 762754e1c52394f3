"""Evaluation suites: the pure parts shared by the control plane and the runtime (torch-free).

- `pass_at_k(n, c, k)`: the unbiased estimator 1 - C(n-c, k) / C(n, k) of "at least one of k samples passes", from n
  samples of which c passed (Chen et al. 2021); `summarize` averages it over the prompts of a suite.
- `metric_value(scores, metric)`: a checkpoint's value of `checkpoint.metric` ("<suite>/mean" ...), None unscored.
- `retained(iterations, values, keep, select)`: which checkpoints retention keeps: `latest` the newest `keep`;
  `best` the top `keep` by value, the newest (resume needs it) and every one not scored yet (its evaluation may
  still make it the best).
- `EvaluationTask` / `EvaluationStore`: what the runtime's evaluation runner (workers/runtime/evaluation.py) reads
  and writes; the control plane implements the store (backend/services/evaluations.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

STATS = ("mean", "pass@1", "pass@k")
MAX_STORED_ROWS = 512  # per-row outputs kept per evaluation (the metrics cover every row)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c of them passing) passes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def summarize(scores: Sequence[Sequence[float]], *, k: int, threshold: float) -> dict[str, float]:
    """Per-prompt sample scores -> {mean, pass@1, pass@k, k, prompts, samples}."""
    if not scores or any(not row for row in scores):
        raise ValueError("every prompt needs at least one scored sample")
    flat = [s for row in scores for s in row]
    passes = [sum(1 for s in row if s >= threshold) for row in scores]
    at_1 = [pass_at_k(len(row), c, 1) for row, c in zip(scores, passes, strict=True)]
    at_k = [pass_at_k(len(row), c, min(k, len(row))) for row, c in zip(scores, passes, strict=True)]
    return {"mean": sum(flat) / len(flat), "pass@1": sum(at_1) / len(at_1), "pass@k": sum(at_k) / len(at_k),
            "k": float(k), "prompts": float(len(scores)), "samples": float(len(flat))}


def metric_value(scores: Mapping[str, Mapping[str, Any]], metric: str) -> float | None:
    """`scores`: suite name -> that suite's summary; `metric`: "<suite>/<stat>"."""
    suite, _, stat = metric.partition("/")
    value = (scores.get(suite) or {}).get(stat)
    return float(value) if isinstance(value, int | float) else None


def retained(iterations: Sequence[int], values: Mapping[int, float | None], *, keep: int, select: str) -> set[int]:
    """The checkpoint iterations retention keeps (see the module's docstring)."""
    if not iterations:
        return set()
    ordered = sorted(iterations)
    if select != "best":
        return set(ordered[-keep:])
    scored = [it for it in ordered if values.get(it) is not None]
    top = sorted(scored, key=lambda it: (-float(values[it] or 0.0), -it))[:keep]
    unscored = {it for it in ordered if values.get(it) is None}
    return set(top) | unscored | {ordered[-1]}


def best_of(values: Mapping[int, float | None]) -> int | None:
    """The iteration with the highest value (the newest among equals); None when nothing is scored."""
    scored = [(float(v), it) for it, v in values.items() if v is not None]
    return max(scored)[1] if scored else None


@dataclass(frozen=True)
class EvaluationTask:
    """One evaluation to run: a model directory (a registered model or a checkpoint) and one suite."""

    evaluation_id: int
    team_id: int
    model_dir: str
    suite: dict[str, Any]  # EvalSuiteSpec as JSON
    dataset_path: str | None  # the uploaded dataset's file when the suite's dataset names one by id
    seed: int = 0
    generation: dict[str, Any] | None = None  # the job's GenerationSpec (engine settings); None: defaults


class EvaluationStore(ABC):
    @abstractmethod
    def claim(self, evaluation_id: int) -> EvaluationTask | None:
        """Mark the evaluation running and return it; None when it is gone or no longer queued."""

    @abstractmethod
    def finish(self, evaluation_id: int, summary: dict[str, float], rows: list[dict[str, Any]]) -> None: ...

    @abstractmethod
    def fail(self, evaluation_id: int, error: str) -> None: ...
