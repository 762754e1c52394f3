"""A batch of samples scored on several sandbox workers at once (`python` rewards): `Lanes`.

Scored one after another, a reward that takes its whole `timeout_s` on every sample holds a batch for samples x
timeout_s (32 x 60 s: half an hour before the batch, and its errors, came out). Lanes score up to `width` samples at
once, each lane a SandboxWorker (its own jail, with the jail's limits per process) driven by its own thread, and hand
each outcome back as soon as it is ready, so the caller reports a failure as it happens.

Invariants:
- a lane's thread lives as long as the lanes: a jail dies with the thread that started it (bwrap --die-with-parent
  follows the thread), so a thread per batch would restart the jails at every batch;
- `lane_width`: at most MAX_WIDTH lanes, no more than the CPUs this process may run on (concurrent calls never push
  each other past their wall-clock timeout for want of a core) and address-space limits adding up to at most
  MEMORY_BUDGET_MB;
- an abandoned batch (its reader stopped, or `cancel` was set) leaves nothing running: its queued calls are skipped
  and its running calls are killed (`SandboxWorker.interrupt`), so the lanes are free at once;
- each lane keeps its own module state and /scratch: what one call leaves for the next is per lane.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from workers.rewards.base import RewardOutcome

MAX_WIDTH = 4  # lanes of one reward at most
MEMORY_BUDGET_MB = 2048  # the lanes' address-space limits (memory_mb each) add up to at most this
CANCEL_POLL_S = 0.1  # how often a waiting reader looks at its `cancel` event
JOIN_S = 5.0  # close: how long to wait for a lane's thread after its call was killed

Item = tuple[str, str, Mapping[str, Any] | None]


class LaneWorker(Protocol):
    """What a lane drives: workers/rewards/sandbox.py's SandboxWorker."""

    def call(self, prompt: str, response: str, meta: Mapping[str, Any],
             cancel: threading.Event | None = None) -> RewardOutcome: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


W = TypeVar("W", bound=LaneWorker)


def lane_width(memory_mb: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WIDTH, cpus, MEMORY_BUDGET_MB // max(1, memory_mb)))


@dataclass(eq=False)
class _Batch:
    items: list[Item]
    done: queue.SimpleQueue[tuple[int, RewardOutcome]] = field(default_factory=queue.SimpleQueue)
    abandoned: threading.Event = field(default_factory=threading.Event)


class _Lane:
    def __init__(self, worker: LaneWorker, tasks: queue.SimpleQueue[tuple[_Batch, int] | None], name: str):
        self.worker, self.tasks = worker, tasks
        self.batch: _Batch | None = None  # whose call runs now; set before the call looks at `abandoned`
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (task := self.tasks.get()) is not None:
            batch, index = task
            self.batch = batch
            try:
                if batch.abandoned.is_set():
                    continue
                prompt, response, meta = batch.items[index]
                try:
                    outcome = self.worker.call(prompt, response, meta or {}, cancel=batch.abandoned)
                except Exception as exc:  # `call` turns the code's failures into outcomes: this is the harness's
                    outcome = RewardOutcome.failed(f"{type(exc).__name__}: {exc}")
                batch.done.put((index, outcome))
            finally:
                self.batch = None


class Lanes(Generic[W]):
    """Up to `width` workers (`first`, then more made by `make_worker` when a batch needs them)."""

    def __init__(self, first: W, make_worker: Callable[[], W], width: int):
        self.make_worker, self.width = make_worker, max(1, width)
        self.workers = [first]
        self.tasks: queue.SimpleQueue[tuple[_Batch, int] | None] = queue.SimpleQueue()
        self.lanes: list[_Lane] = []
        self._lock = threading.Lock()

    def _open(self, wanted: int) -> None:
        with self._lock:
            while len(self.lanes) < min(wanted, self.width):
                if len(self.workers) == len(self.lanes):
                    self.workers.append(self.make_worker())
                worker = self.workers[len(self.lanes)]
                self.lanes.append(_Lane(worker, self.tasks, name=f"reward-lane-{len(self.lanes)}"))

    def score_each(self, items: Iterable[Item], cancel: threading.Event | None = None) -> Iterator[
            tuple[int, RewardOutcome]]:
        """(index, outcome) of each item as soon as it is scored, in any order; once `cancel` is set (or the reader
        stops reading) the rest of the batch is dropped and its running calls are killed."""
        batch = _Batch(list(items))
        if not batch.items or (cancel is not None and cancel.is_set()):
            return
        self._open(len(batch.items))
        for index in range(len(batch.items)):
            self.tasks.put((batch, index))
        left = len(batch.items)
        try:
            while left:
                if cancel is not None and cancel.is_set():
                    return
                try:
                    got = batch.done.get(timeout=CANCEL_POLL_S)
                except queue.Empty:
                    continue
                left -= 1
                yield got
        finally:
            if left:
                self._abandon(batch)

    def _abandon(self, batch: _Batch) -> None:
        batch.abandoned.set()  # before looking at the lanes: a lane that starts this batch's call from now on skips it
        for lane in list(self.lanes):
            if lane.batch is batch:
                lane.worker.interrupt()

    def close(self) -> None:
        for _ in self.lanes:
            self.tasks.put(None)
        for lane in self.lanes:
            if lane.batch is not None:
                lane.batch.abandoned.set()
                lane.worker.interrupt()
        for lane in self.lanes:
            if lane.thread is not threading.current_thread():
                lane.thread.join(timeout=JOIN_S)
        for worker in self.workers:
            worker.close()
        self.lanes = []
