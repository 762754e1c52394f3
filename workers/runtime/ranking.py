"""The driver's output-length ranker: predicts each prompt's response length, refit on what instances produced.

Uses the dispatch part's `LengthRanker` when it is installed; until then `HistoryRanker` (mean of the prompt's
earlier response lengths, the recent overall mean for unseen prompts). Both expose predict / observe /
recent_lengths, plus `recall` of the true longest prompts (the paper's metric).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from backend.schemas.spec import JobSpec
from workers.sample import Sample

RECENT = 2048


class Ranker(Protocol):
    def predict(self, rows: Sequence[dict[str, Any]]) -> list[float]: ...

    def observe(self, samples: Sequence[Sample]) -> None: ...

    def recent_lengths(self) -> list[float]: ...


class HistoryRanker:
    def __init__(self) -> None:
        self.by_prompt: dict[str, tuple[float, int]] = {}  # prompt_id -> (mean length, count)
        self.recent: deque[float] = deque(maxlen=RECENT)

    def predict(self, rows: Sequence[dict[str, Any]]) -> list[float]:
        default = float(np.mean(self.recent)) if self.recent else 0.0
        return [self.by_prompt.get(str(r["prompt_id"]), (default + len(str(r["prompt"])) * 1e-3, 0))[0]
                for r in rows]

    def observe(self, samples: Sequence[Sample]) -> None:
        for s in samples:
            mean, count = self.by_prompt.get(s.prompt_id, (0.0, 0))
            self.by_prompt[s.prompt_id] = ((mean * count + len(s.response_ids)) / (count + 1), count + 1)
            self.recent.append(float(len(s.response_ids)))

    def recent_lengths(self) -> list[float]:
        return list(self.recent)


def setup_ranker(spec: JobSpec) -> Ranker:
    return HistoryRanker()


def recall_top(predicted: Sequence[float], actual: Sequence[float], share: float) -> float:
    """Of the true longest `share` of prompts, the fraction the prediction also put in its longest `share`."""
    n = len(actual)
    k = max(1, int(round(share * n)))
    if n == 0:
        return 0.0
    true_top = set(sorted(range(n), key=lambda i: -actual[i])[:k])
    pred_top = set(sorted(range(n), key=lambda i: -predicted[i])[:k])
    return len(true_top & pred_top) / k
