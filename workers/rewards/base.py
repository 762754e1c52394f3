"""Reward contracts: `RewardFn` (what users and built-ins write) and `Reward` (what the runtime calls).

See docs/architecture.md#stable-interfaces.

A `RewardFn` returns a float, or a dict of named float components. A `Reward` never raises for a sample's sake: a
broken reward yields `RewardOutcome(value=0.0, components={}, error="...")` and the caller carries on.
Dict results: the scalar is `d["reward"]` when present, else the sum of the components.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class RewardFn(Protocol):
    def __call__(self, prompt: str, response: str, meta: dict[str, Any]) -> float | dict[str, float]: ...


@dataclass(frozen=True)
class RewardOutcome:
    value: float
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # set => value is 0.0 and the sample's reward is not trustworthy

    @classmethod
    def failed(cls, error: str) -> RewardOutcome:
        return cls(value=0.0, components={}, error=error)


class RewardResultError(ValueError):
    """A reward function returned something that is not a finite float or a dict of finite floats."""


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RewardResultError(f"{what} must be a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise RewardResultError(f"{what} must be finite, got {result}")
    return result


def outcome_from_result(raw: Any) -> RewardOutcome:
    """Validate a RewardFn's return value into an outcome; raises RewardResultError naming what is wrong."""
    if isinstance(raw, Mapping):
        if not raw:
            raise RewardResultError("reward returned an empty dict")
        components: dict[str, float] = {}
        for key, val in raw.items():
            if not isinstance(key, str):
                raise RewardResultError(f"reward dict keys must be str, got {type(key).__name__}")
            components[key] = _as_float(val, f"reward component {key!r}")
        value = components["reward"] if "reward" in components else sum(components.values())
        return RewardOutcome(value=value, components=components)
    return RewardOutcome(value=_as_float(raw, "reward"))


class Reward(ABC):
    """A built reward. `score` never raises for a bad sample; `close` frees sandbox processes."""

    name: str = "reward"

    @abstractmethod
    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome: ...

    def score_many(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[RewardOutcome]:
        """Score (prompt, response, meta) triples in order."""
        return [self.score(prompt, response, meta) for prompt, response, meta in items]

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (sandbox processes). Idempotent."""

    def __enter__(self) -> Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
