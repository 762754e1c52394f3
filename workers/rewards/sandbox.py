"""User reward code (`type: python`) in a long-lived, locked-down worker process, restarted when it dies.

Containment (what a hostile or broken `reward()` runs into):
- its own process (`python -I -S`: stdlib only, no site-packages, env vars ignored), killed with its process group
  when a call exceeds the wall timeout; the next call starts a fresh worker.
- rlimits: RLIMIT_CPU per call (SIGXCPU kills the worker), RLIMIT_AS (memory: MemoryError or death),
  RLIMIT_FSIZE 16 MB, no core files.
- as root (containers): a fresh network namespace with no interfaces (`unshare --net`), then the worker drops to uid/gid
  `nobody` so the kernel refuses writes to files it does not own, and RLIMIT_NPROC=0 refuses fork and threads.
  Without root neither is available; then RLIMIT_NPROC=0 applies to the caller's uid (fork is refused) and the
  network is only blocked by the audit hook (below) -- a determined attacker with a C-extension escape could get
  around that, so run workers as root in a container (as the deploy files do) for the strong form.
- a `sys.addaudithook` hook (cannot be removed from Python) refusing process creation (os.fork/exec/spawn/system,
  subprocess), sockets, ctypes, signal handlers, threads, rlimit changes other than CPU time, and file writes,
  renames and deletions outside the scratch dir (the worker's cwd, removed on close).
Every failure becomes `RewardOutcome(value=0.0, error=...)` for that sample only.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from workers.rewards.base import Reward, RewardOutcome, RewardResultError, outcome_from_result

CHILD = Path(__file__).with_name("sandbox_child.py")
NOBODY = 65534
MAX_REPLY_BYTES = 1 << 20
STARTUP_TIMEOUT_S = 20.0


@cache
def network_namespace_available() -> bool:
    """Root with `unshare` that can really create a network namespace here."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return False
    probe = subprocess.run([unshare, "--net", "--", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


class _DeadWorker(Exception):
    pass


class SandboxWorker:
    """One worker process running `code`; `call` sends one sample and waits at most `timeout_s` for the answer."""

    def __init__(self, code: str, *, timeout_s: float = 2.0, memory_mb: int = 256, cpu_s: int | None = None,
                 cpu_lifetime_s: int = 3600):
        self.code, self.timeout_s, self.memory_mb, self.cpu_lifetime_s = code, timeout_s, memory_mb, cpu_lifetime_s
        self.cpu_s = cpu_s if cpu_s is not None else max(1, int(timeout_s + 0.999))  # CPU seconds per call
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: str | None = None
        self.protections: list[str] = []
        self.load_error: str | None = None  # the code itself is broken: every call fails with this, no restarts
        self.restarts = 0
        self._buffer = b""
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, SandboxWorker._cleanup, [None, None])

    # -- process lifecycle -------------------------------------------------------------------------------------
    @staticmethod
    def _cleanup(state: list[Any]) -> None:
        proc, scratch = state
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def _start(self) -> None:
        self.scratch = tempfile.mkdtemp(prefix="streamrl-reward-")
        as_root = os.geteuid() == 0
        if as_root:
            os.chown(self.scratch, NOBODY, NOBODY)
        netns = network_namespace_available()
        cmd = ([shutil.which("unshare") or "unshare", "--net", "--"] if netns else []) + [
            sys.executable, "-I", "-S", str(CHILD)]
        with open(os.path.join(self.scratch, ".stderr.log"), "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                         cwd=self.scratch, start_new_session=True, env={"LANG": "C.UTF-8"})
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, SandboxWorker._cleanup, [self.proc, self.scratch])
        self._buffer = b""
        config = {"code": self.code, "memory_mb": self.memory_mb, "cpu_lifetime_s": self.cpu_lifetime_s,
                  "cpu_per_call_s": self.cpu_s, "netns": netns,
                  "drop_uid": NOBODY if as_root else None, "drop_gid": NOBODY if as_root else None}
        self._send(config)
        hello = self._receive(STARTUP_TIMEOUT_S)
        if hello.get("loading"):
            try:
                hello = self._receive(self.timeout_s)
            except TimeoutError:
                hello = {"error": f"loading reward code failed: time limit exceeded ({self.timeout_s:g}s)"}
            except _DeadWorker as exc:
                hello = {"error": f"loading reward code failed: {exc}"}
        if not hello.get("ready"):
            self.load_error = str(hello.get("error", "the sandbox worker did not start"))
            self._stop()
        else:
            self.protections = [str(p) for p in hello.get("protections", [])]

    def _stop(self) -> None:
        self._finalizer()
        self.proc, self.scratch = None, None

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stderr_tail(self) -> str:
        if self.scratch is None:
            return ""
        try:
            with open(os.path.join(self.scratch, ".stderr.log"), "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 300))
                return log.read().decode(errors="replace").strip()
        except OSError:
            return ""

    # -- wire ---------------------------------------------------------------------------------------------------
    def _send(self, message: Mapping[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message, default=str).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _DeadWorker("the sandbox worker exited") from exc

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _DeadWorker(self._death_reason())
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise _DeadWorker(f"the sandbox worker sent more than {MAX_REPLY_BYTES} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise _DeadWorker("the sandbox worker sent a malformed reply")
        return reply

    def _death_reason(self) -> str:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "the sandbox worker closed its output stream"
        if code == -signal.SIGXCPU:
            return f"CPU time limit exceeded ({self.cpu_s}s)"
        if code < 0:
            reason = f"the sandbox worker was killed by {signal.Signals(-code).name}"
        else:
            reason = f"the sandbox worker exited with status {code}"
        if code in (-signal.SIGKILL, -signal.SIGSEGV, -signal.SIGABRT):
            reason += " (memory limit or crash)"
        tail = self._stderr_tail()
        return f"{reason}: {tail[-200:]}" if tail else reason

    # -- calls --------------------------------------------------------------------------------------------------
    def call(self, prompt: str, response: str, meta: Mapping[str, Any]) -> RewardOutcome:
        with self._lock:
            if self.load_error is None and self.proc is None:
                try:
                    self._start()
                except (TimeoutError, _DeadWorker, ValueError) as exc:
                    self._stop()
                    reason = str(exc) or f"no answer within {STARTUP_TIMEOUT_S:g}s"
                    return RewardOutcome.failed(f"sandbox worker failed to start: {reason}")
            if self.load_error is not None:
                return RewardOutcome.failed(self.load_error)
            try:
                self._send({"prompt": prompt, "response": response, "meta": dict(meta)})
                reply = self._receive(self.timeout_s)
            except TimeoutError:
                self._restart()
                return RewardOutcome.failed(f"time limit exceeded ({self.timeout_s:g}s wall clock)")
            except (_DeadWorker, ValueError) as exc:
                self._restart()
                return RewardOutcome.failed(str(exc))
            if not reply.get("ok"):
                if reply.get("restart"):
                    self._restart()
                return RewardOutcome.failed(str(reply.get("error", "reward code failed")))
            try:
                return outcome_from_result(reply.get("result"))
            except RewardResultError as exc:
                return RewardOutcome.failed(str(exc))

    def _restart(self) -> None:
        self._stop()  # the next call starts a fresh worker
        self.restarts += 1


class PythonReward(Reward):
    """`type: python`: params timeout_s (2.0), memory_mb (256)."""

    name = "python"

    def __init__(self, code: str, *, timeout_s: float = 2.0, memory_mb: int = 256):
        if not 0 < timeout_s <= 600:
            raise ValueError(f"reward 'python': param 'timeout_s' must be in (0, 600], got {timeout_s}")
        if not 32 <= memory_mb <= 65536:
            raise ValueError(f"reward 'python': param 'memory_mb' must be in [32, 65536], got {memory_mb}")
        self.worker = SandboxWorker(code, timeout_s=timeout_s, memory_mb=memory_mb)

    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome:
        return self.worker.call(prompt, response, meta or {})

    def close(self) -> None:
        self.worker.close()
