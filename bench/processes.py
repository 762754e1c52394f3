"""Process helpers the benchmarks share (each bench runs as a script, so this directory is on sys.path)."""

from __future__ import annotations

import os
import subprocess


def stop_process_groups(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each still-running process's group, then SIGKILL any group that has not exited within 30 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def child_pythonpath(repo: object) -> str:
    """PYTHONPATH for a bench's child processes: the repository first, then whatever the caller already had (a
    machine whose packages live on PYTHONPATH rather than in a venv)."""
    return os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
