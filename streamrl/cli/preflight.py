"""Checks `streamrl up` makes before it starts anything: one `up` per data dir, and a free API port."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from backend.private_files import private_dir
from streamrl.cli.errors import CLIError

LOCK_FILE = "up.lock"


def lock_data_dir(data_dir: Path) -> IO[str]:
    """Hold an exclusive lock on `<data_dir>/up.lock` for as long as the returned file stays open.

    A second `up` on the same data dir would share (and, on start-up, replace) the first one's embedded Redis."""
    private_dir(data_dir)  # 0700: tenant data is readable by the platform only
    handle = (data_dir / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        message = f"another `streamrl up` (pid {holder}) is using {data_dir}; stop it or pass --data-dir"
        raise CLIError(message) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no obstacle
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CLIError(f"cannot listen on {host}:{port} ({exc.strerror}); is another server using it? "
                           "pass --port") from None

