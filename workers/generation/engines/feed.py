"""`RequestFeed`: the lazily consumed request iterator that every engine's `generate_stream` admits from.

    feed = RequestFeed(requests)
    admitted, idle = feed.pull(free_slots)   # at most free_slots requests; never reads past a None item
    if feed.exhausted and nothing in flight: done

A `None` item means "nothing to admit right now" (a live feed with no request yet): `pull` stops there and reports
`idle`, so the engine keeps decoding what it has (or sleeps briefly when it has nothing) and asks again later.
"""

from __future__ import annotations

from collections.abc import Iterable

from workers.generation.engine import GenerationRequest


class RequestFeed:
    def __init__(self, requests: Iterable[GenerationRequest | None]) -> None:
        self._source = iter(requests)
        self.exhausted = False  # the iterator has ended

    def pull(self, room: int) -> tuple[list[GenerationRequest], bool]:
        """Up to `room` requests, in order; returns (requests, idle) where idle says a `None` item cut the pull short.
        Consumes exactly the items returned (plus the `None` or the end), so requests stay lazily consumed."""
        pulled: list[GenerationRequest] = []
        while not self.exhausted and len(pulled) < room:
            try:
                item = next(self._source)
            except StopIteration:
                self.exhausted = True
                break
            if item is None:
                return pulled, True
            pulled.append(item)
        return pulled, False
