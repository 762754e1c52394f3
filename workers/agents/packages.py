"""An agent's packages (`agent.requirements`): installed once per requirements hash, outside the jail, by the
worker's own pip with the host's pip configuration (its index, extra indexes, certificates), into
`<data_dir>/agent-packages/<hash>`; made read-only and bound read-only into every jail of that agent at
/agent-packages (the harness puts it first on sys.path).

A build runs once per host at a time (a file lock); others wait for it and reuse it. The tree is built in a temp
dir and renamed into place complete, so a crashed build never leaves a half-installed cache entry. A failed build
raises PackagesFailed naming the requirement (contract/agent.py `pip_failure`); the failure is remembered for
this process (every episode fails with it, the job says it once).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

from contract.agent import pip_failure, pip_install_argv, requirements_key

BUILD_TIMEOUT_S = 900.0
_failures: dict[str, str] = {}
_lock = threading.Lock()


class PackagesFailed(RuntimeError):
    """The agent's requirements cannot be installed; the message names the requirement."""


def _read_only(root: Path) -> None:
    for directory, dirs, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod((mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH) & ~0o222)
        for name in dirs:
            path = Path(directory, name)
            if not path.is_symlink():
                path.chmod(0o555)
    root.chmod(0o555)


def _writable(root: Path) -> None:
    for directory, dirs, _ in os.walk(root):
        for name in dirs:
            Path(directory, name).chmod(0o755)
    root.chmod(0o755)


def ensure_packages(requirements: list[str], cache_dir: Path, field: str = "agent.requirements") -> str | None:
    """The read-only packages dir for `requirements` (None: none asked for); builds it if no host build exists.
    `field`: the spec field a failure names (environment.requirements for an OpenEnv server's)."""
    if not requirements:
        return None
    key = requirements_key(requirements, sys.version)
    with _lock:
        if key in _failures:
            raise PackagesFailed(_failures[key])
    final = cache_dir / key
    if final.is_dir():
        return str(final)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per host; the others wait and reuse it
        if final.is_dir():
            return str(final)
        building = cache_dir / f".{key}.{os.getpid()}.building"
        if building.exists():
            _writable(building)
            shutil.rmtree(building)
        why: str | None = None
        try:
            done = subprocess.run(pip_install_argv(sys.executable, requirements, target=str(building)),
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            why = f"{field}: installing took over {BUILD_TIMEOUT_S:g}s"
        else:
            why = None if done.returncode == 0 else pip_failure(done.stderr + done.stdout, requirements, field)
        if why is not None:
            shutil.rmtree(building, ignore_errors=True)
            with _lock:
                _failures[key] = why
            raise PackagesFailed(why)
        _read_only(building)
        building.rename(final)
    return str(final)
