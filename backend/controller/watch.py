"""The controller's watch loops: background threads beside the reconcile loop. One sends due alert deliveries
(backend/services/alert_delivery.py) and records stalls (backend/controller/stalls.py) and training-signal changes
(backend/controller/signal_events.py) and deletes expired Tinker checkpoints (backend/services/tinker_checkpoints.py);
the other mirrors iterations
to experiment trackers (backend/trackers/sync.py), so a slow tracker never delays an alert. Everything they act on
is a database row, so a restarted controller picks up where the last one stopped; a failing step is logged and
retried at the next tick, and neither ever delays reconciling.

Idle pace: while the controller's last pass saw no active job (`set_busy(False)`), deliveries are looked for every
IDLE_EVERY_S (an admin's test delivery still goes out within seconds), stalls and training signals (running jobs
only) not at all, trackers every IDLE_TRACKERS_EVERY_S; a pass that sees an active job again brings the ticks back
at once. An idle platform then costs well under 1% of a core (bench/idle_cpu.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from sqlalchemy import Engine

from backend.controller.signal_events import note_signals
from backend.controller.stalls import note_stalls
from backend.db.session import session_scope
from backend.services.alert_delivery import deliver_due
from backend.services.tinker_checkpoints import sweep_expired
from backend.trackers.sync import OpenSinks, sync_trackers
from contract.settings import Settings

log = logging.getLogger("streamrl.controller.watch")
STALL_EVERY_S = 5.0
TRACKERS_EVERY_S = 3.0
IDLE_EVERY_S = 5.0
IDLE_TRACKERS_EVERY_S = 10.0
CHECKPOINT_SWEEP_EVERY_S = 5.0  # expired Tinker checkpoints deleted (they already answer 404 once expired)


class WatchLoop:
    def __init__(self, settings: Settings, client: redis.Redis, engine: Engine | None = None,
                 interval_s: float = 1.0, tracker_interval_s: float = TRACKERS_EVERY_S) -> None:
        self.settings, self.client, self.engine, self.interval_s = settings, client, engine, interval_s
        self.tracker_interval_s = tracker_interval_s
        self._stop = threading.Event()
        self._busy = True  # an active job to watch (until the controller says otherwise)
        self._pace = threading.Condition()  # notified when the loop turns busy or stops
        self._threads: list[threading.Thread] = []
        self._next_stall_check = 0.0
        self._next_checkpoint_sweep = 0.0
        self.sinks = OpenSinks()

    def set_busy(self, busy: bool) -> None:
        """What the controller's last pass saw: active jobs (ticks every interval) or none (the idle pace)."""
        with self._pace:
            woken, self._busy = busy and not self._busy, busy
            if woken:
                self._pace.notify_all()

    def step(self) -> None:
        """One tick: deliveries every time, stalls and training signals every STALL_EVERY_S while jobs are active."""
        self._guard("alert delivery", lambda: deliver_due(self.settings, self.engine))
        if self._busy and time.monotonic() >= self._next_stall_check:
            self._next_stall_check = time.monotonic() + STALL_EVERY_S
            self._guard("stall check", self._stalls)
            self._guard("training-signal check", self._signals)
        if time.monotonic() >= self._next_checkpoint_sweep:
            self._next_checkpoint_sweep = time.monotonic() + CHECKPOINT_SWEEP_EVERY_S
            self._guard("tinker checkpoint sweep", lambda: sweep_expired(self.settings.artifacts))

    def tracker_step(self) -> None:
        self._guard("tracker sync", lambda: sync_trackers(self.settings, self.sinks, self.engine))

    def _stalls(self) -> None:
        with session_scope(self.engine) as session:
            note_stalls(session, self.client)

    def _signals(self) -> None:
        with session_scope(self.engine) as session:
            note_signals(session)

    def _guard(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:  # a database or Redis hiccup: the rows stay due, the next tick retries
            log.warning("%s failed: %s", what, exc)

    def _every(self, interval_s: float, idle_s: float, step: Callable[[], None]) -> None:
        while not self._stop.is_set():
            step()
            with self._pace:
                if self._busy:
                    self._pace.wait_for(self._stop.is_set, interval_s)
                else:
                    self._pace.wait_for(lambda: self._stop.is_set() or self._busy, max(interval_s, idle_s))

    def start(self) -> WatchLoop:
        for name, interval, idle, step in (
                ("streamrl-watch", self.interval_s, IDLE_EVERY_S, self.step),
                ("streamrl-trackers", self.tracker_interval_s, IDLE_TRACKERS_EVERY_S, self.tracker_step)):
            thread = threading.Thread(target=self._every, args=(interval, idle, step), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._pace:
            self._stop.set()
            self._pace.notify_all()
        for thread in self._threads:
            thread.join(timeout_s)
        self.sinks.close_all()
