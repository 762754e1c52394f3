"""User reward code (`type: python`) in a long-lived sandboxed worker process, restarted when it dies.

Modes (workers/rewards/jail.py chooses; `PythonReward.mode` says which ran):
- `jail`: the harness runs inside bubblewrap (namespaces, read-only runtime, tmpfs scratch, uid 65534, seccomp,
  rlimits); see jail.py for the full list. The kernel is the boundary.
- `weak` (only with STREAMRL_REWARD_SANDBOX=weak, for single-tenant machines): a plain child process with rlimits,
  as root an empty network namespace (`unshare --net`) and uid `nobody`, and a Python audit hook. Not a boundary
  against a determined tenant.
Both: rlimits on address space, open files, file size and core files set before exec; a wall-clock timeout per call
after which the worker's process group is killed (the next call starts a fresh worker); protocol over private pipes
(channel.py). Every failure becomes `RewardOutcome(value=0.0, error=...)` for that sample only.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from workers.rewards.base import Reward, RewardOutcome, RewardResultError, outcome_from_result
from workers.rewards.channel import Channel, ChannelError, ProtocolViolation, StaleReply
from workers.rewards.jail import JAIL_UID, SandboxUnavailable, choose_mode, jail_command
from workers.rewards.lanes import Lanes, lane_width

CHILD = Path(__file__).with_name("sandbox_child.py")
STARTUP_TIMEOUT_S = 20.0
OPEN_FILES = 64
FILE_SIZE_MB = 16
MAX_ERROR_CHARS = 500
DEATH_WAIT_S = 5.0  # at most this long for a worker that closed its pipe to exit (start-up; calls wait less)


@cache
def network_namespace_available() -> bool:
    """Root with `unshare` that can really create a network namespace here (weak mode only)."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return False
    probe = subprocess.run([unshare, "--net", "--", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


def _limits(memory_mb: int, cpu_lifetime_s: int) -> Any:
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_MB << 20, FILE_SIZE_MB << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_lifetime_s, cpu_lifetime_s))

    return apply


class _Process:
    """One started harness: the process, its channel and (weak mode) its scratch dir."""

    def __init__(self, proc: subprocess.Popen[bytes], channel: Channel, scratch: str | None, drop_uid: int | None):
        self.proc, self.channel, self.scratch, self.drop_uid = proc, channel, scratch, drop_uid

    @staticmethod
    def stop(state: list[Any]) -> None:
        proc, channel, scratch = state
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # bwrap --die-with-parent takes the jail down with it
        proc.wait()
        channel.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)  # fd-based, does not follow links the child planted


class SandboxCallFailed(Exception):
    """One call to the sandboxed code failed; the message says why (time limit, crash, the code's own error...)."""


class SandboxWorker:
    """One worker process running `code`; `call` sends one sample and waits at most `timeout_s` for the answer."""

    def __init__(self, code: str, *, timeout_s: float = 2.0, memory_mb: int = 256, cpu_s: int | None = None,
                 cpu_lifetime_s: int = 3600, mode: str | None = None, kind: str = "reward",
                 max_output_per_call: int | None = None):
        """`kind`: what the harness runs, "reward" (reward(prompt, response, meta)) or "environment" (reset/step,
        workers/environments/base.py). `max_output_per_call`: bytes the code may print during one call; past
        it the call fails (None: no limit, only the tail is kept)."""
        self.code, self.timeout_s, self.memory_mb, self.cpu_lifetime_s = code, timeout_s, memory_mb, cpu_lifetime_s
        self.kind, self.max_output_per_call = kind, max_output_per_call
        self.cpu_s = cpu_s if cpu_s is not None else max(1, int(timeout_s + 0.999))  # CPU seconds per call
        self.mode = mode or choose_mode()  # raises SandboxUnavailable where python rewards may not run
        self.protections: list[str] = []
        self.load_error: str | None = None  # the code itself is broken: every call fails with this, no restarts
        self.restarts = 0
        self.last_output = ""  # the tail of what the last worker printed (user prints; never parsed)
        self._current: _Process | None = None
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    # -- process lifecycle -------------------------------------------------------------------------------------
    def _spawn(self) -> _Process:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        scratch, drop_uid, extra_fds = None, None, []
        try:
            if self.mode == "jail":
                jail = jail_command(CHILD.read_bytes())
                argv, extra_fds, drop_uid = jail.argv, jail.fds, jail.drop_uid
                self.protections = jail.protections
            else:
                scratch = tempfile.mkdtemp(prefix="streamrl-reward-")
                netns = network_namespace_available()
                if os.geteuid() == 0:
                    os.chown(scratch, JAIL_UID, JAIL_UID)
                    drop_uid = JAIL_UID
                argv = ([shutil.which("unshare") or "unshare", "--net", "--"] if netns else []) + [
                    sys.executable, "-I", "-S", str(CHILD)]
                self.protections = ["process", "audit-hook"] + (["net-ns"] if netns else []) + (
                    [f"uid={JAIL_UID}"] if drop_uid is not None else [])
            argv = [*argv, str(req_r), str(rep_w)]
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                    pass_fds=(req_r, rep_w, *extra_fds), cwd=scratch or "/",
                                    start_new_session=True, env={"LANG": "C.UTF-8"},
                                    preexec_fn=_limits(self.memory_mb, self.cpu_lifetime_s))
        except BaseException:
            for fd in (req_w, rep_r, out_r):
                os.close(fd)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        finally:
            for fd in (req_r, rep_w, out_w, *extra_fds):
                os.close(fd)
        os.set_blocking(out_r, False)
        self.protections += [f"rlimit-as={self.memory_mb}MB", f"rlimit-nofile={OPEN_FILES}", "rlimit-nproc=0",
                             "rlimit-cpu", "wall-timeout"]
        return _Process(proc, Channel(req_w, rep_r, out_r), scratch, drop_uid)

    def _start(self) -> None:
        current = self._current = self._spawn()
        self._finalizer = weakref.finalize(self, _Process.stop, [current.proc, current.channel, current.scratch])
        current.channel.send({"code": self.code, "memory_mb": self.memory_mb, "cpu_lifetime_s": self.cpu_lifetime_s,
                              "cpu_per_call_s": self.cpu_s, "mode": self.mode, "kind": self.kind,
                              "drop_uid": current.drop_uid})
        hello = current.channel.receive(STARTUP_TIMEOUT_S, last=False)
        if hello.get("loading"):
            try:
                hello = current.channel.receive(self.timeout_s)
            except TimeoutError:
                hello = {"error": f"loading {self.kind} code failed: time limit exceeded ({self.timeout_s:g}s)"}
            except ChannelError as exc:
                hello = {"error": f"loading {self.kind} code failed: {self._death_reason(exc)}"}
        if hello.get("ready") is not True:
            self.load_error = str(hello.get("error", "the sandbox worker did not start"))[:MAX_ERROR_CHARS]
            self._stop()

    def _stop(self) -> None:
        if self._current is not None:
            self.last_output = self._current.channel.output_tail(1000)
        if self._finalizer is not None:
            self._finalizer()
        self._current, self._finalizer = None, None

    def close(self) -> None:
        with self._lock:
            self._stop()

    def interrupt(self) -> None:
        """Kill the running harness now, from any thread: a call waiting on it fails at once (the next call starts a
        fresh worker). Without the lock: the call holding it is what must end."""
        current = self._current
        if current is not None and current.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(current.proc.pid, signal.SIGKILL)

    def _death_reason(self, exc: ChannelError, wait_s: float = DEATH_WAIT_S) -> str:
        """Why the worker broke: a protocol violation says so at once (the restart kills it); a closed pipe waits at
        most `wait_s` for the exit status (the call's own time limit bounds it)."""
        assert self._current is not None
        if isinstance(exc, ProtocolViolation):
            return str(exc)
        proc = self._current.proc
        try:
            code = proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return str(exc)
        if code > 128 and self.mode == "jail":  # bwrap reports a signalled child as 128 + signal
            code = -(code - 128)
        if code == -signal.SIGXCPU:
            return f"CPU time limit exceeded ({self.cpu_s}s)"
        if code < 0:
            reason = f"the sandbox worker was killed by {signal.Signals(-code).name}"
        else:
            reason = f"the sandbox worker exited with status {code}"
        if code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
            reason += " (memory limit or crash)"
        self._current.channel.drain_output()
        tail = self._current.channel.output_tail()
        return f"{reason}: {tail}" if tail else reason

    # -- calls --------------------------------------------------------------------------------------------------
    def call(self, prompt: str, response: str, meta: Mapping[str, Any],
             cancel: threading.Event | None = None) -> RewardOutcome:
        """`cancel`: once set, the call fails without running (set it, then `interrupt`, to end a running call)."""
        try:
            reply = self.request({"prompt": prompt, "response": response, "meta": dict(meta)}, cancel)
        except SandboxCallFailed as exc:
            return RewardOutcome.failed(str(exc))
        try:
            return outcome_from_result(reply.get("result"))
        except RewardResultError as exc:
            return RewardOutcome.failed(str(exc)[:MAX_ERROR_CHARS])

    def request(self, payload: dict[str, Any], cancel: threading.Event | None = None) -> dict[str, Any]:
        """Send one request to the harness and return its successful reply (`{"ok": true, "result": ...}`); raises
        SandboxCallFailed with the reason otherwise (the worker is restarted where it must be)."""
        with self._lock:
            try:
                return self._request(payload, cancel)
            except StaleReply:  # the previous call's code wrote extra replies: run this one on a fresh worker
                self._restart()
            try:
                return self._request(payload, cancel)
            except StaleReply as exc:  # written again before this call ran: the code itself is broken
                self._restart()
                raise SandboxCallFailed(str(exc)) from None

    def _request(self, payload: dict[str, Any], cancel: threading.Event | None) -> dict[str, Any]:
        if self._current is not None and self._current.proc.poll() is not None:
            self._stop()  # died while idle (bwrap --die-with-parent follows the thread that started it): start anew
        if self.load_error is None and self._current is None:
            try:
                self._start()
            except (TimeoutError, ChannelError, OSError, SandboxUnavailable) as exc:
                reason = str(exc) or f"no answer within {STARTUP_TIMEOUT_S:g}s"
                if isinstance(exc, ChannelError) and self._current is not None:
                    reason = self._death_reason(exc)
                self._stop()
                raise SandboxCallFailed(f"sandbox worker failed to start: {reason}"[:MAX_ERROR_CHARS]) from None
        if self.load_error is not None:
            raise SandboxCallFailed(self.load_error)
        assert self._current is not None
        if cancel is not None and cancel.is_set():  # checked after the start: an `interrupt` from now on ends the call
            raise SandboxCallFailed(f"{self.kind} call abandoned")
        channel = self._current.channel
        deadline = time.monotonic() + self.timeout_s
        printed = channel.output_bytes
        try:
            channel.send(payload)
            reply = channel.receive(self.timeout_s)
        except TimeoutError:
            self._restart()
            raise SandboxCallFailed(f"time limit exceeded ({self.timeout_s:g}s wall clock)") from None
        except StaleReply:
            raise
        except ChannelError as exc:
            reason = self._death_reason(exc, max(0.05, deadline - time.monotonic()))
            self._restart()
            raise SandboxCallFailed(reason[:MAX_ERROR_CHARS]) from None
        channel.drain_output()
        if self.max_output_per_call is not None and channel.output_bytes - printed > self.max_output_per_call:
            flood = channel.output_bytes - printed
            self._restart()
            raise SandboxCallFailed(f"the code printed {flood} bytes in one call; the limit is "
                                    f"{self.max_output_per_call} bytes")
        if reply.get("ok") is not True:
            if reply.get("restart"):
                self._restart()
            raise SandboxCallFailed(str(reply.get("error", f"{self.kind} code failed"))[:MAX_ERROR_CHARS])
        return reply

    def _restart(self) -> None:
        self._stop()  # the next call starts a fresh worker
        self.restarts += 1


class PythonReward(Reward):
    """`type: python`: params timeout_s (2.0, at most 60), memory_mb (256, 64..4096).

    A batch (`score_each`, `score_many`) is scored on up to `lane_width(memory_mb)` workers at once (lanes.py), each
    outcome handed back as it is ready. Building it chooses the sandbox mode and raises SandboxUnavailable (jail.py)
    where python rewards may not run.
    """

    name = "python"

    def __init__(self, code: str, *, timeout_s: float = 2.0, memory_mb: int = 256, mode: str | None = None,
                 width: int | None = None):
        first = SandboxWorker(code, timeout_s=timeout_s, memory_mb=memory_mb, mode=mode)
        def another() -> SandboxWorker:
            return SandboxWorker(code, timeout_s=timeout_s, memory_mb=memory_mb, mode=first.mode)

        self.lanes = Lanes(first, another, lane_width(memory_mb) if width is None else width)

    @property
    def worker(self) -> SandboxWorker:
        """The first worker (single calls; its `protections` say how every lane is confined)."""
        return self.lanes.workers[0]

    @property
    def restarts(self) -> int:
        return sum(worker.restarts for worker in self.lanes.workers)

    @property
    def sandbox_mode(self) -> str | None:
        return self.worker.mode

    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome:
        return self.worker.call(prompt, response, meta or {})

    def score_each(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]],
                   cancel: threading.Event | None = None) -> Iterator[tuple[int, RewardOutcome]]:
        return self.lanes.score_each(items, cancel)

    def score_many(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[RewardOutcome]:
        batch = list(items)
        outcomes: list[RewardOutcome | None] = [None] * len(batch)
        for index, outcome in self.score_each(batch):
            outcomes[index] = outcome
        return [outcome or RewardOutcome.failed("not scored") for outcome in outcomes]  # each is, uncancelled

    def close(self) -> None:
        self.lanes.close()
