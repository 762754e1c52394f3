"""Reward contracts: `RewardFn` (what users and built-ins write) and `Reward` (what the runtime calls).

See docs/architecture.md#stable-interfaces.

A `RewardFn` returns a float, or a dict of named float components. A `Reward` never raises for a sample's sake: a
broken reward yields `RewardOutcome(value=0.0, components={}, error="...")` and the caller carries on.
Dict results: the scalar is `d["reward"]` when present, else the sum of the components.
Values: finite numbers only (NaN, infinities and integers too large for a float such as 10**400 are a per-sample
error); finite values are clamped to [-REWARD_LIMIT, REWARD_LIMIT]. A dict has at most MAX_COMPONENTS entries.
"""

from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

REWARD_LIMIT = 1e6
MAX_COMPONENTS = 64


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
    try:
        result = float(value)
    except OverflowError:
        raise RewardResultError(f"{what} is too large for a float (must be finite)") from None
    if not math.isfinite(result):
        raise RewardResultError(f"{what} must be finite, got {result}")
    return max(-REWARD_LIMIT, min(REWARD_LIMIT, result))


def outcome_from_result(raw: Any) -> RewardOutcome:
    """Validate a RewardFn's return value into an outcome; raises RewardResultError naming what is wrong."""
    if isinstance(raw, Mapping):
        if not raw:
            raise RewardResultError("reward returned an empty dict")
        if len(raw) > MAX_COMPONENTS:
            raise RewardResultError(f"reward returned {len(raw)} components; at most {MAX_COMPONENTS}")
        components: dict[str, float] = {}
        for key, val in raw.items():
            if not isinstance(key, str) or len(key) > 100:
                raise RewardResultError("reward dict keys must be str of at most 100 characters")
            components[key] = _as_float(val, f"reward component {key!r}")
        value = components["reward"] if "reward" in components else _as_float(sum(components.values()), "reward")
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

    def score_each(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]],
                   cancel: threading.Event | None = None) -> Iterator[tuple[int, RewardOutcome]]:
        """(index, outcome) of each triple as soon as it is scored, in any order; nothing more once `cancel` is set.
        Here the batch at once (`score_many`: a judge or reward model grades it together); python rewards hand each
        outcome back as it is ready (workers/rewards/lanes.py)."""
        if cancel is None or not cancel.is_set():
            yield from enumerate(self.score_many(items))

    @property
    def sandbox_mode(self) -> str | None:
        """'jail' or 'weak' when this reward runs user code (workers/rewards/jail.py), else None."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (sandbox processes). Idempotent."""

    def __enter__(self) -> Reward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TimedReward(Reward):
    """`reward` that adds up the seconds its scoring takes; `take_seconds()` returns them since the last take (the
    iteration breakdown's `reward_seconds` in colocated mode and train-local)."""

    def __init__(self, reward: Reward):
        self.inner, self.name, self.seconds = reward, reward.name, 0.0

    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome:
        return self.score_many([(prompt, response, meta)])[0]

    def score_many(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[RewardOutcome]:
        start = time.monotonic()
        try:
            return self.inner.score_many(items)
        finally:
            self.seconds += time.monotonic() - start

    def take_seconds(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    @property
    def sandbox_mode(self) -> str | None:
        return self.inner.sandbox_mode

    def close(self) -> None:
        self.inner.close()
