"""Timeline spans in the shape the dashboard's pipeline view draws: `{lane, kind, start, end}` (seconds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

SpanKind = Literal["generating", "loading_weights", "idle", "training", "waiting"]
MIN_SPAN_S = 1e-9


@dataclass(frozen=True)
class Span:
    lane: str
    kind: SpanKind
    start: float
    end: float

    def to_dict(self) -> dict[str, str | float]:
        return asdict(self)


class TimelineBuilder:
    """Collects spans; drops empty ones and merges a span into the previous one of its lane when contiguous."""

    def __init__(self) -> None:
        self._lanes: dict[str, list[Span]] = {}

    def add(self, lane: str, kind: SpanKind, start: float, end: float) -> None:
        if end - start <= MIN_SPAN_S:
            return
        spans = self._lanes.setdefault(lane, [])
        if spans and spans[-1].kind == kind and abs(spans[-1].end - start) <= 1e-6:
            spans[-1] = Span(lane, kind, spans[-1].start, end)
        else:
            spans.append(Span(lane, kind, start, end))

    def spans(self) -> list[Span]:
        """All spans, the 'trainer' lane first, then gen-0, gen-1, ..., each lane in time order."""
        lanes = sorted(self._lanes, key=lambda name: (name != "trainer", _lane_index(name), name))
        return [span for lane in lanes for span in sorted(self._lanes[lane], key=lambda s: s.start)]


def _lane_index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1
