"""`environment.type: openenv` with `code`: the platform serves the OpenEnv environment itself, in the bubblewrap jail
(workers/rewards/jail.py with the agent seccomp variant: local sockets, threads only), for the job's episodes.

The worker binds a unix socket in a private dir (0700) and listens on it; the jailed server (openenv_child.py) gets
the listening fd and serves the user's `app` (uvicorn) on it. Its network namespace has only loopback and nothing
is bound into it but its packages (`environment.requirements`, built like agent.requirements by
workers/agents/packages.py, read-only at /env-packages): the worker is the only client it can have, and the server
reaches nothing. Each episode's session is a WebSocket over that socket (openenv_env.py).

A server that dies (crash, memory limit, killed) is started again at the next connect; the sessions it held are
lost and their episodes retried from their reset (openenv_env.py), as with a server at a URL. Because the worker
keeps listening, connects made while it restarts wait in the socket's backlog instead of being refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workers.agents.packages import PackagesFailed, ensure_packages
from workers.environments.base import MAX_ERROR_CHARS, EnvironmentFailure
from workers.rewards.jail import SandboxUnavailable, jail_command

CHILD = Path(__file__).with_name("openenv_child.py")
PACKAGES = "/env-packages"
START_S = 300.0  # importing a server's packages (openenv-core, fastapi) takes seconds idle, minutes on a loaded host
OPEN_FILES = 1024
TAIL_CHARS = 2000
BACKLOG = 512


def _limits(memory_mb: int) -> Callable[[], None]:
    def apply() -> None:  # between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


class JailedServer:
    """The jailed server of one environment (one per job process); `ensure_running` starts it (again)."""

    def __init__(self, code: str, requirements: list[str], *, memory_mb: int, cache_dir: Path,
                 start_s: float = START_S):
        self.code, self.requirements, self.memory_mb = code, list(requirements), memory_mb
        self.cache_dir, self.start_s = cache_dir, start_s
        self.dir = tempfile.mkdtemp(prefix="streamrl-openenv-")
        self.path = os.path.join(self.dir, "server.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(BACKLOG)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.tail = b""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The running jail's process (bwrap) id."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def ensure_running(self) -> None:
        """Start the server unless it runs; EnvironmentFailure names why it cannot start."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            self._stop()
            try:
                packages = ensure_packages(self.requirements, self.cache_dir, "environment.requirements")
            except PackagesFailed as exc:
                raise EnvironmentFailure(str(exc)[:MAX_ERROR_CHARS]) from None
            self._start(packages)

    def _start(self, packages: str | None) -> None:
        try:
            command = jail_command(CHILD.read_bytes(), agent=True, hostname="openenv-jail",
                                   ro_binds=[(packages, PACKAGES)] if packages else [])
        except SandboxUnavailable as exc:
            raise EnvironmentFailure(f"an OpenEnv server from `code` runs only in the jail: {exc}") from None
        self.starts += 1
        ready_r, ready_w = os.pipe()
        out_r, out_w = os.pipe()
        listen_fd = self.listener.fileno()
        try:
            self.proc = subprocess.Popen([*command.argv, str(listen_fd), str(ready_w)], stdin=subprocess.PIPE,
                                         stdout=out_w, stderr=out_w, pass_fds=(listen_fd, ready_w, *command.fds),
                                         start_new_session=True, env={"LANG": "C.UTF-8"},
                                         preexec_fn=_limits(self.memory_mb))
        except OSError as exc:
            os.close(ready_r)
            os.close(out_r)
            raise EnvironmentFailure(f"the OpenEnv server's jail could not start: {exc}") from None
        finally:
            for fd in (ready_w, out_w, *command.fds):
                os.close(fd)
        threading.Thread(target=self._drain, args=(out_r,), daemon=True, name="openenv-server-output").start()
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(json.dumps({"code": self.code, "drop_uid": command.drop_uid,
                                              "start": self.starts}).encode())
            self.proc.stdin.close()
        try:
            answer = self._wait_ready(ready_r)
        finally:
            os.close(ready_r)
        if answer != "ready":
            self._stop()
            raise EnvironmentFailure(f"the OpenEnv server did not start: {answer}"[:MAX_ERROR_CHARS])

    def _wait_ready(self, ready_r: int) -> str:
        deadline, data = time.monotonic() + self.start_s, b""
        while time.monotonic() < deadline:
            readable, _, _ = select.select([ready_r], [], [], min(1.0, max(0.0, deadline - time.monotonic())))
            if not readable:
                continue
            chunk = os.read(ready_r, 4096)
            if not chunk:
                break
            data += chunk
        if data == b"ready":
            return "ready"
        if data.startswith(b"error "):
            return str(json.loads(data[6:]))
        if not data and time.monotonic() >= deadline:
            return f"not ready within {self.start_s:g}s"
        with contextlib.suppress(subprocess.TimeoutExpired):
            assert self.proc is not None
            self.proc.wait(timeout=2)
        tail = self.tail.decode(errors="replace")[-300:]
        return f"it exited (status {self.proc.returncode if self.proc else None})" + (f": {tail}" if tail else "")

    def _drain(self, out_r: int) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(out_r, 65536):
                self.tail = (self.tail + chunk)[-TAIL_CHARS:]
        os.close(out_r)

    def _stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap --die-with-parent takes the jail down with it
        self.proc.wait()
        self.proc = None

    def close(self) -> None:
        with self._lock:
            self._stop()
        with contextlib.suppress(OSError):
            self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)
