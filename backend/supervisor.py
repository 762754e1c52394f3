"""Supervise the child processes of `streamrl up` (API, controller, workers) on one machine.

Invariants:
- every child runs in its own session (process group), so a terminal's Ctrl-C reaches only the supervisor, which then
  stops the children in reverse start order: the child's `stop_signal` to the child alone (it shuts its own workers
  down, e.g. Celery's cold shutdown on SIGQUIT), then SIGKILL to its whole group once it exited or the grace period
  ran out — so grandchildren such as Celery's pool processes never outlive it;
- on Linux a child also gets SIGTERM if the supervisor itself dies (PR_SET_PDEATHSIG), so nothing is orphaned;
- a child with `nice` > 0 runs at that much lower CPU priority (os.nice before exec; its own children inherit it):
  `streamrl up` starts the workers so, so that on a shared host training and generation take the cores the API
  does not need, never the API's turn;
- a child that exits on its own is restarted with exponential backoff; one that fails `max_restarts` times within
  `restart_window_s` is given up on, which is fatal when the child is `critical` (e.g. the API).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

_PR_SET_PDEATHSIG = 1


class SupervisorError(RuntimeError):
    """A critical child keeps failing."""


@dataclass
class ChildSpec:
    name: str
    argv: Sequence[str]
    env: dict[str, str] | None = None
    critical: bool = False
    stop_signal: signal.Signals = signal.SIGTERM
    nice: int = 0  # added to the supervisor's niceness in the child (lower CPU priority)


@dataclass
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes]
    failures: list[float] = field(default_factory=list)  # monotonic times of unexpected exits
    restart_at: float | None = None  # when a crashed child is due to start again


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()  # loaded here, not after fork: dlopen in a forked child can deadlock


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_setup(nice: int) -> Callable[[], None]:
    """What runs in the child between fork and exec: die with the parent, then lower the priority by `nice`."""

    def setup() -> None:
        _die_with_parent()
        if nice > 0:
            os.nice(nice)

    return setup


class Supervisor:
    def __init__(self, *, echo: Callable[[str], None] = print, max_restarts: int = 5,
                 restart_window_s: float = 120.0) -> None:
        self.echo = echo
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self._children: list[_Child] = []

    # ---- starting ---------------------------------------------------------------------------------------------------
    def _spawn(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(spec.argv), env=spec.env, start_new_session=True,
                                preexec_fn=_child_setup(spec.nice))

    def start(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        process = self._spawn(spec)
        self._children.append(_Child(spec, process))
        self.echo(f"started {spec.name} (pid {process.pid})")
        return process

    def pids(self) -> dict[str, int]:
        return {c.spec.name: c.process.pid for c in self._children if c.process.poll() is None}

    def is_alive(self, name: str) -> bool:
        return any(c.spec.name == name and c.process.poll() is None for c in self._children)

    # ---- watching ---------------------------------------------------------------------------------------------------
    def poll(self) -> None:
        """Restart children that exited; raise `SupervisorError` when a critical one fails too often."""
        now = time.monotonic()
        for child in self._children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.process = self._spawn(child.spec)
                    child.restart_at = None
                    self.echo(f"restarted {child.spec.name} (pid {child.process.pid})")
                continue
            code = child.process.poll()
            if code is None:
                continue
            child.failures = [t for t in child.failures if now - t < self.restart_window_s] + [now]
            if len(child.failures) > self.max_restarts:
                message = f"{child.spec.name} exited {len(child.failures)} times within {self.restart_window_s:.0f}s"
                if child.spec.critical:
                    raise SupervisorError(f"{message} (last exit status {code}); giving up")
                self.echo(f"{message}; not restarting it")
                child.restart_at = float("inf")
                continue
            delay = min(2.0 ** (len(child.failures) - 1), 30.0)
            self.echo(f"{child.spec.name} exited with status {code}; restarting in {delay:.0f}s")
            child.restart_at = now + delay

    def wait(self, should_stop: Callable[[], bool], interval_s: float = 0.5) -> None:
        """Watch the children until `should_stop()` is true (or a critical child gives up)."""
        while not should_stop():
            self.poll()
            time.sleep(interval_s)

    # ---- stopping ---------------------------------------------------------------------------------------------------
    def stop_all(self, timeout_s: float = 20.0, resend_s: float = 6.0) -> None:
        """Send each child its stop signal (newest first) and repeat it every `resend_s` (a child still booting may
        not handle it yet; a second signal also forces servers that wait on open connections); after `timeout_s`,
        SIGKILL every child's group."""
        live = [c for c in reversed(self._children) if c.process.poll() is None]
        for child in live:
            self.echo(f"stopping {child.spec.name} (pid {child.process.pid})")
        deadline = time.monotonic() + timeout_s
        next_send = 0.0
        while live and time.monotonic() < deadline:
            if time.monotonic() >= next_send:
                for child in live:
                    with contextlib.suppress(ProcessLookupError):
                        child.process.send_signal(child.spec.stop_signal)
                next_send = time.monotonic() + resend_s
            time.sleep(0.05)
            live = [c for c in live if c.process.poll() is None]
        for child in self._children:
            # Also the group of a leader that exited: its grandchildren may linger.
            _signal_group(child.process.pid, signal.SIGKILL)
            if child.process.poll() is None:
                child.process.wait()
        self._children.clear()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
