"""Output-length distributions for the simulator: parametric (lognormal, pareto) or empirical (a finished job's list).

Lengths are per prompt group: a prompt draws a base length from the distribution, each of its `group_size` samples
scales it by lognormal noise (`within_group_sigma`), and everything is clipped to [1, max_tokens]. A length ranker
with imperfect recall is modelled by predicting the base length times lognormal noise (`ranker_sigma`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Kind = Literal["lognormal", "pareto", "empirical"]


@dataclass(frozen=True)
class LengthDistribution:
    kind: Kind = "lognormal"
    max_tokens: int = 20_000
    median: float = 2_000.0  # lognormal median (tokens)
    sigma: float = 1.0  # lognormal shape
    pareto_alpha: float = 1.5  # pareto tail index
    pareto_min: float = 500.0  # pareto scale (tokens)
    values: tuple[float, ...] = field(default=())  # empirical lengths
    within_group_sigma: float = 0.3
    ranker_sigma: float = 0.5

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.kind == "lognormal" and not (self.median > 0 and self.sigma >= 0):
            raise ValueError("lognormal lengths need median > 0 and sigma >= 0")
        if self.kind == "pareto" and not (self.pareto_alpha > 0 and self.pareto_min > 0):
            raise ValueError("pareto lengths need pareto_alpha > 0 and pareto_min > 0")
        if self.kind == "empirical" and (not self.values or min(self.values) <= 0):
            raise ValueError("empirical lengths need a non-empty list of positive values")
        if self.within_group_sigma < 0 or self.ranker_sigma < 0:
            raise ValueError("within_group_sigma and ranker_sigma must be >= 0")

    @classmethod
    def empirical(cls, lengths: Sequence[float], max_tokens: int | None = None, **kw: float) -> LengthDistribution:
        values = tuple(float(x) for x in lengths)
        if not values:
            raise ValueError("empirical lengths need a non-empty list of positive values")
        return cls(kind="empirical", values=values, max_tokens=max_tokens or int(max(values)), **kw)

    def base_lengths(self, n_prompts: int, rng: np.random.Generator) -> np.ndarray:
        """(n_prompts,) per-prompt base lengths."""
        if self.kind == "lognormal":
            raw = self.median * np.exp(self.sigma * rng.standard_normal(n_prompts))
        elif self.kind == "pareto":
            raw = self.pareto_min * (1.0 + rng.pareto(self.pareto_alpha, n_prompts))
        else:
            raw = rng.choice(np.asarray(self.values, dtype=float), size=n_prompts, replace=True)
        return np.clip(raw, 1.0, self.max_tokens)

    def sample_group_lengths(self, n_prompts: int, group_size: int, rng: np.random.Generator) -> GroupLengths:
        base = self.base_lengths(n_prompts, rng)  # (P,)
        within = self.within_group_sigma if self.kind != "empirical" else 0.0
        noise = np.exp(within * rng.standard_normal((n_prompts, group_size)))  # (P, G)
        lengths = np.clip(np.rint(base[:, None] * noise), 1, self.max_tokens).astype(np.int64)  # (P, G)
        predicted = base * np.exp(self.ranker_sigma * rng.standard_normal(n_prompts))  # (P,)
        return GroupLengths(lengths=lengths, predicted=predicted)

    def mean(self, rng_seed: int = 0, n: int = 20_000) -> float:
        """Expected sample length (Monte Carlo, cached-free; cheap at n=20k)."""
        return float(self.sample_group_lengths(n // 4, 4, np.random.default_rng(rng_seed)).lengths.mean())


@dataclass(frozen=True)
class GroupLengths:
    lengths: np.ndarray  # (P, G) true output lengths
    predicted: np.ndarray  # (P,) the ranker's predicted (relative) length per prompt

    @property
    def flat(self) -> np.ndarray:
        return self.lengths.reshape(-1)  # (P*G,) sample s belongs to prompt s // G
