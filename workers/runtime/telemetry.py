"""Timeline spans (the dashboard's pipeline view) and background heartbeats of runtime processes.

`SpanRecorder` buffers spans of one lane, merging back-to-back spans of the same kind, and flushes them through the
job's reporter (database + live channel on the platform). `Heartbeat` runs a daemon thread that calls `beat()`
every `interval_s`, so a process busy in a long decode step still proves it is alive; it stops when `stop()` is
called (a failed beat is logged and retried at the next tick).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from contract.reporter import Reporter

log = logging.getLogger(__name__)
MERGE_GAP_S = 0.05  # spans of the same kind closer than this are drawn as one


class SpanRecorder:
    def __init__(self, job_id: int, lane: str, reporter: Reporter):
        self.job_id, self.lane, self.reporter = job_id, lane, reporter
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.totals: dict[str, float] = {}  # seconds per kind since the start (for metrics)

    def add(self, kind: str, start: float, end: float) -> None:
        if end <= start:
            return
        with self._lock:
            self.totals[kind] = self.totals.get(kind, 0.0) + (end - start)
            last = self._pending[-1] if self._pending else None
            if last is not None and last["kind"] == kind and start - last["end"] <= MERGE_GAP_S:
                last["end"] = end
            else:
                self._pending.append({"lane": self.lane, "kind": kind, "start": start, "end": end})

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.add(kind, start, time.time())

    def flush(self) -> int:
        with self._lock:
            spans, self._pending = self._pending, []
        if not spans:
            return 0
        self.reporter.record_spans(self.job_id, spans)
        return len(spans)


class Heartbeat:
    def __init__(self, beat: Callable[[], None], interval_s: float = 2.0, name: str = "heartbeat"):
        self._beat, self.interval_s = beat, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> Heartbeat:
        self._beat()  # the first beat happens before the caller goes on
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
            except Exception as exc:  # a failed beat (DB restart) is retried at the next tick
                self.error = exc
                log.warning("heartbeat failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
