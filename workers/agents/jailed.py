"""An agent's bubblewrap jail (workers/rewards/jail.py, with the agent seccomp variant): one harness process
(agent_child.py) that loads the agent's code once and runs up to `agent.episodes_per_jail` consecutive episodes of
one lane, as Celery's prefork pool reuses its child processes (an SDK agent's `import agents` costs ~2.4 s of CPU).

Shared by the episodes of one jail: the process, its imports and module globals (what the code keeps in them, it
keeps). Not shared: the scratch (wiped after each episode), the gateway (the relay answers only the episode running
now, and an episode's token is refused once its episode is over), the limits (CPU seconds, the wall clock, bytes
printed and the reply's size count per episode). A jail is given another episode only after one that ended cleanly
(a reply, no error, within its limits, no Python thread of its own left running, its scratch wiped); any other end
kills it, and the lane's next episode gets a fresh jail. `episodes_per_jail: 1` is a fresh jail per episode.

What the jailed agent has, beyond the reward jail's confinement (namespaces, read-only runtime, uid 65534, capped
tmpfs scratch, no /proc, /etc or host files, empty environment): its packages read-only at /agent-packages, and one
unix socket at /gateway.sock whose other end (relay.py) answers only its current episode's gateway. Its network
namespace has only loopback, where the harness forwards 127.0.0.1:PORT to that socket. Seccomp: sockets of
AF_UNIX/AF_INET/AF_INET6 only, no fork/vfork/non-thread clone (threads only). Limits: address space, open files,
file size, CPU seconds, the wall clock (`timeout_s`), bytes printed and the size of its reply; past any of them the
jail is killed and the episode fails with the reason. The harness shares its process with the agent: what it
reports (the reply, the threads left) is the agent's word, so the isolation that matters (network, tokens, limits,
how many episodes a jail runs) is enforced out here.
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

from workers.rewards.jail import SCRATCH, jail_command, missing_piece

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


def cpu_hard_limit(cpu_s: int, episodes: int) -> int:
    """The harness's hard RLIMIT_CPU: the load's `cpu_s` and each episode's (agent_child.py sets each episode's soft
    limit to the CPU used so far + 1 + `cpu_s`, so an episode that burns its seconds gets SIGXCPU, in any episode of
    the jail, before this hard limit's SIGKILL)."""
    return (episodes + 1) * (cpu_s + 1) + 2


def _limits(memory_mb: int, cpu_hard_s: int) -> Any:
    def apply() -> None:  # between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_MB << 20, FILE_SIZE_MB << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # above the harness's own hard limit (which it lowers to `cpu_hard_s`), never below any episode's soft one
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_hard_s + 3, cpu_hard_s + 3))

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
    """A jail started before its first episode is known: the harness drops its uid, sets its limits, starts the
    gateway forwarder and loads the agent's code (its imports), then waits for an episode's task and key on stdin.
    `run` hands it one episode; while `reusable`, it can be handed the next (at most `episodes` in all; the caller
    counts `runs` against its own maximum). `kill` ends it. `socket_path`: the unix socket bound in at
    /gateway.sock (relay.py; the caller attaches it to each episode in turn)."""

    def __init__(self, code: str, socket_path: str, *, packages: str | None, timeout_s: float, memory_mb: int,
                 scratch_mb: int = 64, episodes: int = 1, cpu_s: int | None = None):
        """`cpu_s`: CPU seconds of the load and of each episode (default: `timeout_s`, rounded up)."""
        self.started = time.monotonic()
        command = jail_command(CHILD.read_bytes(), scratch_mb=scratch_mb, agent=True, hostname="agent-jail",
                               ro_binds=[(packages, PACKAGES)] if packages else [],
                               socket_binds=[(socket_path, GATEWAY_SOCKET)])
        self.rep_r, rep_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.cpu_s = cpu_s or max(1, int(timeout_s + 0.999))
        cpu_hard_s = cpu_hard_limit(self.cpu_s, episodes)
        self.proc: subprocess.Popen[bytes] | None = None
        self.error: str | None = None
        self.runs = 0  # episodes handed to it
        self.reusable = True  # False once an episode did not end cleanly (the jail is killed then)
        self.retired: str | None = None  # why a clean episode still ended the jail (threads left, ...)
        try:
            self.proc = subprocess.Popen([*command.argv, str(rep_w)], stdin=subprocess.PIPE, stdout=out_w,
                                         stderr=out_w, pass_fds=(rep_w, *command.fds), start_new_session=True,
                                         env={"LANG": "C.UTF-8"}, preexec_fn=_limits(memory_mb, cpu_hard_s))
        except OSError as exc:
            self.error = f"the agent's jail could not start: {exc}"
        finally:
            for fd in (rep_w, out_w, *command.fds):
                os.close(fd)
        if self.proc is not None:
            load = {"code": code, "cpu_s": self.cpu_s, "cpu_hard_s": cpu_hard_s, "scratch": SCRATCH,
                    "drop_uid": command.drop_uid}
            self._send(load)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):  # a dead jail: its episode sees it die
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()

    def run(self, task: dict[str, Any], api_key: str, *, timeout_s: float,
            cancel: threading.Event | None = None) -> AgentResult:
        """Run `run(task, base_url, api_key)` for one episode; every failure is the result's `error` (and kills the
        jail). A clean end leaves the jail `reusable`, unless the harness retired it."""
        assert self.reusable, "a jail whose episode did not end cleanly runs no more"
        self.runs += 1
        start = time.monotonic()
        if self.proc is None:
            self.kill()
            return AgentResult(error=self.error)
        proc = self.proc
        clean = False
        try:
            self._send({"task": task, "api_key": api_key, "seq": self.runs})
            reply, error, tail = _collect(proc, self.rep_r, self.out_r, start + timeout_s, timeout_s, cancel)
            result = AgentResult(output=tail, seconds=time.monotonic() - start)
            if error is None:
                try:
                    answer = json.loads(reply)
                except ValueError:
                    error = f"{_death(proc.returncode)}" + (f": {tail[-300:]}" if tail else "")
                    result.lost = lost_jail(proc.returncode)
                else:
                    if not isinstance(answer, dict) or answer.get("seq") != self.runs:  # a line it wrote itself
                        error = "the agent's jail answered out of step (a reply that is not its harness's)"
                    elif answer.get("ok") is True:
                        result.reward = answer.get("reward")
                        self.retired = answer.get("retire") and str(answer["retire"])[:300]
                        clean = not self.retired
                    else:
                        error = f"the agent failed: {answer.get('error')}"
            result.error = None if error is None else error[:1000]
        finally:
            if not clean:
                self.kill()
        return result

    def alive(self) -> bool:
        """Whether the jail is still running and ready for an episode: not killed or crashed while it waited, and
        nothing on its reply pipe between episodes (a reply no episode asked for)."""
        if self.proc is None or self.rep_r < 0 or self.proc.poll() is not None:
            return False
        with selectors.DefaultSelector() as selector:
            selector.register(self.rep_r, selectors.EVENT_READ)
            return not selector.select(0)

    def kill(self) -> None:
        """End the jail (bwrap --die-with-parent takes the whole jail down with it) and close its pipes; idempotent."""
        self.reusable = False
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
    try:
        result = jail.run(task, api_key, timeout_s=timeout_s, cancel=cancel)
    finally:
        jail.kill()
    result.seconds = time.monotonic() - start
    return result


def _collect(proc: subprocess.Popen[bytes], rep_r: int, out_r: int, deadline: float, timeout_s: float,
             cancel: threading.Event | None) -> tuple[bytes, str | None, str]:
    """Read the output and the reply until the episode's reply line is complete (what the episode printed before it
    included); (reply line, error, output tail). A harness that dies without a complete line: an empty reply."""
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
            events = selector.select(min(left, 0.5))
            events.sort(key=lambda event: event[0].fd != out_r)  # output first: it was printed before the reply
            for key, _ in events:
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
                if not data:  # the harness is gone: a reply line cut short is none
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=2)  # its exit status says why
                    return b"", None, tail.decode(errors="replace")
                reply += data
                if len(reply) > MAX_REPLY_BYTES:
                    return reply, f"the agent's reply is over {MAX_REPLY_BYTES >> 10} KB", tail.decode(
                        errors="replace")
                if reply.endswith(b"\n"):  # one episode, one line: anything after it is caught by alive()
                    tail = _drain(out_r, tail)  # printed before the reply, not yet read
                    if reply.count(b"\n") > 1:
                        return reply, "the agent's jail sent more than one reply", tail.decode(errors="replace")
                    return reply, None, tail.decode(errors="replace")
    finally:
        selector.close()


def _drain(out_r: int, tail: bytes) -> bytes:
    """`tail` with what is waiting on the output pipe now (at most MAX_OUTPUT_BYTES)."""
    read = 0
    with selectors.DefaultSelector() as selector:
        selector.register(out_r, selectors.EVENT_READ)
        while read < MAX_OUTPUT_BYTES and selector.select(0):
            data = os.read(out_r, 65536)
            if not data:
                break
            read += len(data)
            tail = (tail + data)[-TAIL_CHARS:]
    return tail
