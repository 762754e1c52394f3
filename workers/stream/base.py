"""The stream interfaces the runtime codes against; `redis_streams` implements them on Redis Streams.

Semantics every implementation keeps: delivery is at-least-once (an entry stays pending until acknowledged and is
re-delivered to another consumer after a timeout), consumption is idempotent on sample ids.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from contract.sample import PromptRequest, Sample


class PromptQueueBase(ABC):
    """Requests dispatched to one generation instance, in admission order."""

    @abstractmethod
    def put(self, requests: Iterable[PromptRequest]) -> int: ...

    @abstractmethod
    def read(self, consumer: str, count: int, block_ms: int = 0) -> list[tuple[str, PromptRequest]]:
        """Up to `count` (entry id, request) pairs: re-delivered ones of dead consumers first, then new ones."""

    @abstractmethod
    def ack(self, entry_ids: list[str]) -> None: ...

    @abstractmethod
    def drain(self) -> list[PromptRequest]:
        """Remove and return everything not yet acknowledged (the instance is gone)."""


class SampleStreamBase(ABC):
    """Finished samples of every instance of one job, consumed by its driver."""

    @abstractmethod
    def publish(self, sample: Sample) -> bool:
        """Append once per sample id; False when that id was already streamed."""

    @abstractmethod
    def already_produced(self, sample_id: str) -> bool: ...

    def produced_among(self, sample_ids: list[str]) -> set[str]:
        """Which of `sample_ids` were streamed already (implementations answer in one round trip)."""
        return {sample_id for sample_id in sample_ids if self.already_produced(sample_id)}

    @abstractmethod
    def forget_produced(self, sample_ids: list[str]) -> None:
        """Allow these ids to be produced again (over-stale samples regenerated at newer weights)."""

    @abstractmethod
    def read(self, consumer: str, count: int, block_ms: int = 0) -> list[tuple[str, Sample]]: ...

    @abstractmethod
    def is_consumed(self, sample_id: str) -> bool: ...

    @abstractmethod
    def commit(self, entries: list[tuple[str, str]]) -> None:
        """(entry id, sample id) pairs were trained on: record the ids as consumed, then acknowledge the entries."""

    @abstractmethod
    def discard(self, entry_ids: list[str]) -> None:
        """Acknowledge entries that will never be trained on (duplicates, over-stale)."""
