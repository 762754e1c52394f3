"""`WeightTransport`: how the trainer's new weights reach every generation instance (docs/architecture.md).

Every publish and fetch is timed; `timings` keeps (kind, version, seconds) so the runtime reports weight-sync cost
as a fraction of iteration time.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from workers.generation.engine import GenerationEngine


@dataclass
class SyncTiming:
    kind: str  # "publish" | "fetch" | "load"
    version: int
    seconds: float


@dataclass
class _Timings:
    entries: list[SyncTiming] = field(default_factory=list)

    @property
    def last_seconds(self) -> float:
        return self.entries[-1].seconds if self.entries else 0.0


class WeightTransport(ABC):
    """Moves versioned state dicts from the trainer (publisher) to generation instances (fetchers)."""

    serves_joiners = False  # True: the trainer's end sends its current version to instances that join (publish once
    # at start so it holds one)

    def __init__(self) -> None:
        self.timings = _Timings()

    @abstractmethod
    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        """Make `version` available to every fetcher; returns the seconds it took."""

    @abstractmethod
    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        """The state dict of `version` (blocks until it is available)."""

    @abstractmethod
    def latest_version(self) -> int:
        """The newest published version (0 = the initial weights)."""

    @abstractmethod
    def wait_for(self, version: int, timeout_s: float) -> None:
        """Block until `version` (or a newer one) is published; TimeoutError after `timeout_s`."""

    def load_into(self, engine: GenerationEngine, version: int) -> float:
        """Make `engine` generate with weights `version`; returns the seconds it took. Default: fetch the tensors
        and copy them in (`GenerationEngine.load_tensors`)."""
        start = time.perf_counter()
        engine.load_tensors(version, self.fetch(version))
        return time.perf_counter() - start

    def take_notes(self) -> list[str]:
        """What the job's events should say since the last call (instances joining or dropped); default none."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release sockets/groups."""

    @contextmanager
    def _timed(self, kind: str, version: int) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.timings.entries.append(SyncTiming(kind, version, time.perf_counter() - start))
