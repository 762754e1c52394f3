"""What the server-starting tests share: a free loopback port, waiting on a condition (never a fixed sleep), and the
API on a real uvicorn server in a thread."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def environ_snapshot() -> dict[str, str]:
    """A copy of os.environ. Copying iterates it, and a thread of this process (an API server in a thread, a library
    importing lazily) may set a variable meanwhile: RuntimeError "dictionary changed size", so copy again."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except RuntimeError:
            time.sleep(0.01)
    return dict(os.environ)


def stop_process_groups(procs: list[subprocess.Popen[bytes]], grace_s: float = 3.0) -> None:
    """A teardown's stop of processes started with `start_new_session=True`: SIGTERM to every group at once, SIGKILL
    to those still there `grace_s` later (in all, not each). For a test that is over; a test of a graceful stop
    waits for it itself."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_until(check: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.1) -> Any:
    """`check()`'s first truthy value; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@contextmanager
def api_in_thread(settings: Any, port: int | None = None, **uvicorn_options: Any) -> Iterator[str]:
    """The platform's API (`create_app(settings)`) on a real uvicorn server in a daemon thread of this process, on
    `port` (default: a free loopback port); yields its base URL and stops it on exit. Real HTTP, so SSE streams and
    the official clients (openai, tinker) talk to it unchanged."""
    import uvicorn

    from backend.main import create_app

    config = uvicorn.Config(create_app(settings), port=port or free_port(), log_level="warning",
                            **uvicorn_options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), 120, "uvicorn to start")  # a loaded machine is slow
    assert server.started, "uvicorn exited before it started"
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
