"""Output-length rankers: predict each prompt's relative output length.

`LengthRanker` is the pluggable part (a small-LM ranker fine-tuned on GPUs would be one more subclass). The default
`FeatureRidgeRanker` combines two signals, both refit online from recent generations:
- prompt features -> ridge regression on log(length): hashed character 1-3-grams plus numeric features (numbers in the
  prompt, word lengths), which generalise to prompts never seen before;
- the lengths the same `prompt_id` produced before (prompts recur across epochs): a per-prompt mean of log lengths,
  trusted more the more often the prompt was seen: log_pred = (n * history + C * ridge) / (n + C).
Only the order of predictions matters to dispatch; they are returned in length units for readability.
"""

from __future__ import annotations

import math
import re
import zlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence

import numpy as np

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[^\W\d_]+")


class LengthRanker(ABC):
    """Predicts relative output lengths; learns from observed (prompt, length) pairs."""

    @abstractmethod
    def predict(self, prompt_ids: Sequence[str], prompts: Sequence[str]) -> list[float]:
        """Predicted output length of each prompt (larger = longer)."""

    @abstractmethod
    def observe(self, prompt_id: str, prompt: str, length: int) -> None:
        """Record one finished generation's response length (tokens)."""

    def refit(self) -> None:  # noqa: B027 - stateless rankers need no refit
        """Refit on recent observations (called once per iteration)."""

    @abstractmethod
    def recent_lengths(self) -> list[float]:
        """Recent observed lengths (the distribution Algorithm 2 takes its P90/P50 from)."""

    def observe_many(self, prompt_ids: Sequence[str], prompts: Sequence[str], lengths: Sequence[int]) -> None:
        for pid, prompt, length in zip(prompt_ids, prompts, lengths, strict=True):
            self.observe(pid, prompt, length)


def prompt_features(prompt: str, n_hash: int = 256) -> np.ndarray:
    """(n_hash + 8,) features: L2-normalised hashed char 1-3-gram counts, then numeric features, then a bias."""
    hashed = np.zeros(n_hash)
    text = prompt.lower()
    for n in (1, 2, 3):
        for i in range(len(text) - n + 1):
            hashed[zlib.crc32(text[i : i + n].encode()) % n_hash] += 1.0
    norm = np.linalg.norm(hashed)
    if norm > 0:
        hashed /= norm
    numbers = [float(x) for x in _NUMBER.findall(prompt)] or [0.0]
    words = _WORD.findall(prompt) or [""]
    numeric = [
        math.log1p(max(numbers)),
        math.log1p(sum(numbers)),
        float(len(numbers)),
        math.log1p(len(prompt)),
        math.log1p(max(len(w) for w in words)),
        math.log1p(len(words[-1])),
        math.log1p(max(numbers)) + math.log1p(len(words[-1])),  # count x unit-size style prompts, in log space
        1.0,
    ]
    return np.concatenate([hashed, np.asarray(numeric)])


class FeatureRidgeRanker(LengthRanker):
    def __init__(self, *, window: int = 4096, ridge: float = 1.0, history_weight: float = 1.0, n_hash: int = 256):
        if window < 1 or ridge <= 0 or history_weight <= 0:
            raise ValueError("FeatureRidgeRanker: need window >= 1, ridge > 0, history_weight > 0")
        self.window, self.ridge, self.history_weight, self.n_hash = window, ridge, history_weight, n_hash
        self._recent: deque[tuple[str, str, float]] = deque(maxlen=window)  # (prompt_id, prompt, length)
        self._history: dict[str, tuple[float, int]] = {}  # prompt_id -> (sum of log lengths, count)
        self._weights: np.ndarray | None = None
        self._features: dict[str, np.ndarray] = {}

    def _feat(self, prompt: str) -> np.ndarray:
        if prompt not in self._features:
            if len(self._features) > 8 * self.window:
                self._features.clear()
            self._features[prompt] = prompt_features(prompt, self.n_hash)
        return self._features[prompt]

    def observe(self, prompt_id: str, prompt: str, length: int) -> None:
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        self._recent.append((prompt_id, prompt, float(length)))
        total, count = self._history.get(prompt_id, (0.0, 0))
        self._history[prompt_id] = (total + math.log1p(length), count + 1)

    def refit(self) -> None:
        if not self._recent:
            return
        x = np.stack([self._feat(prompt) for _, prompt, _ in self._recent])  # (R, F)
        y = np.log1p(np.asarray([length for _, _, length in self._recent]))  # (R,)
        reg = self.ridge * np.eye(x.shape[1])
        reg[-1, -1] = 0.0  # no shrinkage on the bias
        self._weights = np.linalg.solve(x.T @ x + reg, x.T @ y)

    def predict(self, prompt_ids: Sequence[str], prompts: Sequence[str]) -> list[float]:
        if len(prompt_ids) != len(prompts):
            raise ValueError(f"{len(prompt_ids)} prompt ids but {len(prompts)} prompts")
        fallback = float(np.mean(np.log1p([r[2] for r in self._recent]))) if self._recent else 0.0
        preds = []
        for pid, prompt in zip(prompt_ids, prompts, strict=True):
            model = float(self._feat(prompt) @ self._weights) if self._weights is not None else fallback
            total, count = self._history.get(pid, (0.0, 0))
            log_pred = (total + self.history_weight * model) / (count + self.history_weight)
            preds.append(math.expm1(max(log_pred, 0.0)))
        return preds

    def recent_lengths(self) -> list[float]:
        return [length for _, _, length in self._recent]


class OracleRanker(LengthRanker):
    """Knows the true lengths (benchmarks: the upper bound of what a ranker can give)."""

    def __init__(self, true_lengths: dict[str, float]):
        self.true_lengths = dict(true_lengths)

    def predict(self, prompt_ids: Sequence[str], prompts: Sequence[str]) -> list[float]:
        return [self.true_lengths[pid] for pid in prompt_ids]

    def observe(self, prompt_id: str, prompt: str, length: int) -> None:
        self.true_lengths[prompt_id] = float(length)

    def recent_lengths(self) -> list[float]:
        return list(self.true_lengths.values())


def setup_ranker(name: str = "features", **kwargs: float) -> LengthRanker:
    if name == "features":
        return FeatureRidgeRanker(**kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unknown length ranker {name!r}; choose 'features'")
