"""A minimal Server-Sent Events parser (the subset the API emits: `event`, `data`, `id`, comments)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event. `data` is the decoded JSON when the payload is JSON, else the raw text."""

    event: str
    data: Any
    id: str | None = None


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Turn a stream of text lines (without line endings) into events; a blank line ends an event."""
    event, event_id = "message", None
    data: list[str] = []
    for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield SSEEvent(event=event, data=_decode("\n".join(data)), id=event_id)
            event, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue  # comment / keep-alive
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value
    if data:
        yield SSEEvent(event=event, data=_decode("\n".join(data)), id=event_id)
