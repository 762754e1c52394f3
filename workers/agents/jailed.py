"""One agent episode in the bubblewrap jail (workers/rewards/jail.py, with the agent seccomp variant): a fresh jail
per episode, so nothing an agent keeps (files, threads, another episode's token) outlives its episode.

What the jailed agent has, beyond the reward jail's confinement (namespaces, read-only runtime, uid 65534, capped
tmpfs scratch, no /proc, /etc or host files, empty environment): its packages read-only at /agent-packages, and one
unix socket at /gateway.sock whose other end (relay.py) answers only its own episode's gateway. Its network namespace
has only loopback, where the harness (agent_child.py) forwards 127.0.0.1:PORT to that socket. Seccomp: sockets of
AF_UNIX/AF_INET/AF_INET6 only, no fork/vfork/non-thread clone (threads only). Limits: address space, open files,
file size, CPU seconds, the wall clock (`timeout_s`), bytes printed and the size of its reply; past any of them the
jail is killed and the episode fails with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.rewards.jail import jail_command, missing_piece

CHILD = Path(__file__).with_name("agent_child.py")
GATEWAY_SOCKET, PACKAGES = "/gateway.sock", "/agent-packages"
OPEN_FILES = 256
FILE_SIZE_MB = 16
MAX_OUTPUT_BYTES = 8 << 20  # what the agent prints, all told (a flood ends the episode)
MAX_REPLY_BYTES = 64 << 10
TAIL_CHARS = 2000


@dataclass
class AgentResult:
    reward: float | None = None
    error: str | None = None
    output: str = ""  # the tail of what the agent printed
    seconds: float = 0.0
    lost: bool = False  # the jail died by a signal it did not send itself (killed, OOM-killed, crashed): retryable


class AgentJailUnavailable(RuntimeError):
    """Agent code needs the jail (its network must be the gateway alone); this host cannot build it."""


def _limits(memory_mb: int, cpu_s: int) -> Any:
    def apply() -> None:  # between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_MB << 20, FILE_SIZE_MB << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (2 * cpu_s + 5, 2 * cpu_s + 5))  # load + episode (agent_child.py)

    return apply


def check_jail() -> None:
    """Raises AgentJailUnavailable naming what this host lacks (probed once per process)."""
    missing = missing_piece()
    if missing is not None:
        raise AgentJailUnavailable(f"agent.code runs only in the jail, which cannot be built here: {missing}")


def _signalled(code: int | None) -> int | None:
    """The signal that ended the jail (bwrap reports a signalled child as 128 + signal), or None."""
    if code is None:
        return None
    if code > 128:
        return code - 128
    return -code if code < 0 else None


def lost_jail(code: int | None) -> bool:
    """Whether an exit status without a reply is the jail lost, not the agent's own end: a signal other than the CPU
    limit's SIGXCPU (SIGKILL from outside or the OOM killer, SIGSEGV/SIGBUS/SIGABRT of a crash). The agent's own
    exit status, error, time limit and output/reply limits are not (the harness replies, or the runner kills it)."""
    number = _signalled(code)
    return number is not None and number != signal.SIGXCPU


def _death(code: int | None) -> str:
    if code is None:
        return "the agent's jail did not exit"
    if code > 128:  # bwrap reports a signalled child as 128 + signal
        code = -(code - 128)
    if code == -signal.SIGXCPU:
        return "CPU time limit exceeded"
    if code < 0:
        return f"the agent was killed by {signal.Signals(-code).name} (memory limit or crash)"
    return f"the agent exited with status {code} before answering"


class AgentJail:
    """A jail started for ONE episode before that episode is known: the harness drops its uid, sets its limits, starts
    the gateway forwarder and loads the agent's code (its imports: `import agents` costs seconds of CPU), then waits
    for its episode's task and key on stdin. `run` hands it the episode; the jail ends with it (`kill` ends an unused
    one). `socket_path`: the unix socket bound in at /gateway.sock (relay.py; attached to the episode at `run`)."""

    def __init__(self, code: str, socket_path: str, *, packages: str | None, timeout_s: float, memory_mb: int,
                 scratch_mb: int = 64):
        self.started = time.monotonic()
        command = jail_command(CHILD.read_bytes(), scratch_mb=scratch_mb, agent=True, hostname="agent-jail",
                               ro_binds=[(packages, PACKAGES)] if packages else [],
                               socket_binds=[(socket_path, GATEWAY_SOCKET)])
        self.rep_r, rep_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.cpu_s = max(1, int(timeout_s + 0.999))
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self.used = False
        try:
            self.proc = subprocess.Popen([*command.argv, str(rep_w)], stdin=subprocess.PIPE, stdout=out_w,
                                         stderr=out_w, pass_fds=(rep_w, *command.fds), start_new_session=True,
                                         env={"LANG": "C.UTF-8"}, preexec_fn=_limits(memory_mb, self.cpu_s))
        except OSError as exc:
            self.error = f"the agent's jail could not start: {exc}"
        finally:
            for fd in (rep_w, out_w, *command.fds):
                os.close(fd)
        if self.proc is not None:
            assert self.proc.stdin is not None
            load = {"code": code, "cpu_s": self.cpu_s, "drop_uid": command.drop_uid}
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write(json.dumps(load).encode() + b"\n")
                self.proc.stdin.flush()

    def run(self, task: dict[str, Any], api_key: str, *, timeout_s: float,
            cancel: threading.Event | None = None) -> AgentResult:
        """Run `run(task, base_url, api_key)` for this jail's episode; every failure is the result's `error`."""
        assert not self.used, "a jail runs one episode"
        self.used = True
        start = time.monotonic()
        if self.proc is None:
            self.kill()
            return AgentResult(error=self.error)
        proc = self.proc
        try:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps({"task": task, "api_key": api_key}).encode() + b"\n")
                proc.stdin.close()
            reply, error, tail = _collect(proc, self.rep_r, self.out_r, start + timeout_s, timeout_s, cancel)
        finally:
            self.kill()
        result = AgentResult(output=tail, seconds=time.monotonic() - start)
        if error is None:
            try:
                answer = json.loads(reply)
            except ValueError:
                error = f"{_death(proc.returncode)}" + (f": {tail[-300:]}" if tail else "")
                result.lost = lost_jail(proc.returncode)
            else:
                if answer.get("ok") is True:
                    result.reward = answer.get("reward")
                else:
                    error = f"the agent failed: {answer.get('error')}"
        result.error = None if error is None else error[:1000]
        return result

    def alive(self) -> bool:
        """Whether the jail is still running (a jail started ahead can be killed or crash while it waits)."""
        return self.proc is not None and self.rep_r >= 0 and self.proc.poll() is None

    def kill(self) -> None:
        """End the jail (bwrap --die-with-parent takes the whole jail down with it) and close its pipes; idempotent."""
        if self.rep_r < 0:
            return
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
        os.close(self.rep_r)
        os.close(self.out_r)
        self.rep_r = self.out_r = -1


def run_agent(code: str, task: dict[str, Any], api_key: str, socket_path: str, *, packages: str | None,
              timeout_s: float, memory_mb: int, scratch_mb: int = 64,
              cancel: threading.Event | None = None) -> AgentResult:
    """Run `run(task, base_url, api_key)` for one episode in a jail started for it; every failure is the result's
    `error`, never raised. `timeout_s` counts the start and the code's loading too."""
    start = time.monotonic()
    jail = AgentJail(code, socket_path, packages=packages, timeout_s=timeout_s, memory_mb=memory_mb,
                     scratch_mb=scratch_mb)
    result = jail.run(task, api_key, timeout_s=timeout_s, cancel=cancel)
    result.seconds = time.monotonic() - start
    return result


def _collect(proc: subprocess.Popen[bytes], rep_r: int, out_r: int, deadline: float, timeout_s: float,
             cancel: threading.Event | None) -> tuple[bytes, str | None, str]:
    """Read the reply and the output until the reply is complete; (reply, error, output tail)."""
    reply, printed, tail = b"", 0, b""
    selector = selectors.DefaultSelector()
    selector.register(rep_r, selectors.EVENT_READ)
    selector.register(out_r, selectors.EVENT_READ)
    try:
        while True:
            if cancel is not None and cancel.is_set():
                return reply, "the episode was abandoned (its job or instance stopped)", tail.decode(errors="replace")
            left = deadline - time.monotonic()
            if left <= 0:
                return reply, f"time limit exceeded (agent.timeout_s: the agent ran {timeout_s:.3g}s)", tail.decode(
                    errors="replace")
            for key, _ in selector.select(min(left, 0.5)):
                data = os.read(key.fd, 65536)
                if key.fd == out_r:
                    if not data:
                        selector.unregister(out_r)
                        continue
                    printed += len(data)
                    tail = (tail + data)[-TAIL_CHARS:]
                    if printed > MAX_OUTPUT_BYTES:
                        return reply, f"the agent printed over {MAX_OUTPUT_BYTES >> 20} MB", tail.decode(
                            errors="replace")
                    continue
                if not data:  # the harness closed its reply: complete (or it died without one)
                    if not reply:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=2)  # its exit status says why
                    return reply, None, tail.decode(errors="replace")
                reply += data
                if len(reply) > MAX_REPLY_BYTES:
                    return reply, f"the agent's reply is over {MAX_REPLY_BYTES >> 10} KB", tail.decode(
                        errors="replace")
    finally:
        selector.close()
