"""The reward jail: bubblewrap (`bwrap`) command lines for user reward code, and the choice of sandbox mode.

What the jailed process has (docs/operator.md, "Reward isolation"):
- its own mount, PID, IPC, UTS, cgroup and network namespaces (no interfaces but a down loopback);
- a filesystem of: the Python runtime (`sys.base_prefix`) and the shared libraries (/usr/lib*, /lib*) read-only,
  the harness file (copied in from a memfd), a minimal /dev and a size-capped tmpfs /scratch as cwd; everything
  but /scratch is read-only (bwrap's own root, /harness, /dev and /dev/shm included), in both modes. No /proc (so
  no view of any process, and no procfs mount, which container runtimes refuse), no /etc, /home, /root, /tmp, /var,
  data dir, database, datasets or checkpoints;
- an unprivileged uid: as root, bwrap keeps only CAP_SETUID/SETGID and the harness drops to uid/gid 65534 before
  any user code runs; as a non-root worker, a user namespace maps the worker's uid to 65534 (`--disable-userns`);
- no capabilities, no_new_privs, a new session (no TTY injection), death with its parent, an empty environment;
- a seccomp deny list (workers/rewards/seccomp.py): no sockets, mounts, namespaces, ptrace, keyrings, bpf, ...;
- rlimits: address space, open files, file size, no core files (set before exec), CPU time per call and no new
  processes or threads (RLIMIT_NPROC=0, set by the harness before user code).

Mode: `jail` whenever it can be built. When it cannot (no bwrap, user namespaces refused, no libseccomp), python
rewards are refused with `SandboxUnavailable` naming the missing piece, unless the operator sets
`STREAMRL_REWARD_SANDBOX=weak` (single-tenant machines): then the weak mode (a process + audit hook) runs instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from workers.rewards.seccomp import SeccompUnavailable, deny_filter

SETTING = "STREAMRL_REWARD_SANDBOX"
SETTINGS = ("jail", "weak")
JAIL_UID = 65534
HARNESS_PATH = "/harness/sandbox_child.py"
SCRATCH = "/scratch"
LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32")
RO_REMOUNTS = ("--remount-ro", "/dev", "--remount-ro", "/")  # everything but /scratch (and /dev/pts, no storage)


class SandboxUnavailable(RuntimeError):
    """Python rewards cannot run here: the jail cannot be built and the weak mode is not allowed."""


@dataclass
class JailCommand:
    argv: list[str]
    fds: list[int] = field(default_factory=list)  # memfds bwrap reads; the caller passes them and closes them
    drop_uid: int | None = None  # the harness drops to this uid/gid before user code (root mode)
    protections: list[str] = field(default_factory=list)


def bwrap_binary() -> str | None:
    """bwrap on the worker's PATH (the operator's PATH decides which one runs, and a PATH without it means none)."""
    return shutil.which("bwrap")


def python_runtime() -> tuple[str, str]:
    """(prefix, interpreter): the base interpreter (not a venv's symlink) and the tree it needs."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    if not exe.startswith(prefix + os.sep):
        candidate = os.path.join(prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
        exe = candidate if os.access(candidate, os.X_OK) else exe
    return prefix, exe


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # inheritable: bwrap reads it
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _filesystem(prefix: str) -> list[str]:
    """Read-only binds of the runtime and the shared libraries; their parent dirs made 0755 (bwrap would copy the
    host's modes, and the jail uid must traverse /usr or /root/.pyenv even where the host's are private)."""
    binds = [prefix]
    links: list[str] = []
    for lib in LIB_DIRS:
        if prefix == lib or prefix.startswith(lib + os.sep):
            continue
        if os.path.islink(lib):
            links += ["--symlink", os.readlink(lib), lib]
        elif os.path.isdir(lib):
            binds.append(lib)
    parents = sorted({str(p) for bind in binds for p in Path(bind).parents if str(p) != "/"},
                     key=lambda p: p.count("/"))
    args: list[str] = []
    for parent in parents:
        args += ["--perms", "0755", "--dir", parent]
    for bind in binds:
        args += ["--ro-bind", bind, bind]
    return args + links


def jail_command(harness: bytes, *, scratch_mb: int = 64, ro_binds: Sequence[tuple[str, str]] = (),
                 socket_binds: Sequence[tuple[str, str]] = (), agent: bool = False,
                 hostname: str = "reward-jail") -> JailCommand:
    """The bwrap command line running the harness; raises SandboxUnavailable naming what is missing.
    `ro_binds` (host path, jail path): more read-only trees (an agent's packages); `socket_binds`: unix sockets
    bound in (an agent's gateway); `agent`: the agent seccomp variant (seccomp.py: local sockets, threads only)."""
    bwrap = bwrap_binary()
    if bwrap is None:
        raise SandboxUnavailable("bubblewrap is not installed (apt-get install bubblewrap)")
    try:
        bpf = deny_filter(agent)
    except SeccompUnavailable as exc:
        raise SandboxUnavailable(str(exc)) from exc
    prefix, exe = python_runtime()
    as_root = os.geteuid() == 0
    seccomp_fd, harness_fd = _memfd("streamrl-seccomp", bpf), _memfd("streamrl-harness", harness)
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", hostname, "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", SCRATCH, "--setenv", "TMPDIR", SCRATCH]
    if as_root:  # no user namespace: the harness itself drops to JAIL_UID, keeping nothing else
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--uid", str(JAIL_UID), "--gid", str(JAIL_UID), "--disable-userns"]
    argv += _filesystem(prefix)
    for source, target in ro_binds:
        argv += ["--ro-bind", source, target]
    for source, target in socket_binds:
        argv += ["--bind", source, target]
    argv += ["--perms", "0444", "--ro-bind-data", str(harness_fd), HARNESS_PATH, "--dev", "/dev",
             "--perms", "1777", "--size", str(scratch_mb << 20), "--tmpfs", SCRATCH, "--chdir", SCRATCH,
             # bwrap's root and /dev are RAM-backed tmpfs the size of the host's memory, owned by the jail uid in a
             # user namespace: read-only from here on (device nodes stay usable), so the capped scratch is the only
             # place the code can write. --remount-ro is not recursive: /scratch keeps its own writable mount.
             *RO_REMOUNTS, "--seccomp", str(seccomp_fd), "--", exe, "-I", "-S", HARNESS_PATH]
    protections = ["bwrap", "mount-ns", "pid-ns", "net-ns", "ipc-ns", "uts-ns", "no-proc", "seccomp", "no-new-privs",
                   f"uid={JAIL_UID}", f"scratch-tmpfs={scratch_mb}MB", "read-only-root"]
    protections.append("userns" if not as_root else "cap-drop")
    return JailCommand(argv, [seccomp_fd, harness_fd], JAIL_UID if as_root else None, protections)


@cache
def missing_piece() -> str | None:
    """None when a jail really starts here; else what is missing (probed once per process)."""
    try:
        command = jail_command(b"import sys\nsys.exit(0)\n")
    except SandboxUnavailable as exc:
        return str(exc)
    try:
        probe = subprocess.run(command.argv, pass_fds=command.fds, capture_output=True, timeout=30,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    finally:
        for fd in command.fds:
            os.close(fd)
    if probe.returncode == 0:
        return None
    detail = probe.stderr.decode(errors="replace").strip()[-300:]
    if "namespace" in detail.lower() or "permission" in detail.lower():
        return (f"bubblewrap cannot create the jail's namespaces ({detail}); unprivileged user namespaces must be "
                "allowed (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0) or the "
                "worker run as root with CAP_SYS_ADMIN")
    return f"bubblewrap failed to start the jail (exit {probe.returncode}): {detail}"


def configured_setting() -> str:
    value = os.environ.get(SETTING, "jail").strip().lower() or "jail"
    if value not in SETTINGS:
        raise SandboxUnavailable(f"{SETTING}={value!r} is not one of {list(SETTINGS)}")
    return value


def choose_mode(setting: str | None = None) -> str:
    """'jail' when it can be built; 'weak' only where the operator allowed it; else SandboxUnavailable."""
    setting = setting or configured_setting()
    missing = missing_piece()
    if missing is None:
        return "jail"
    if setting == "weak":
        return "weak"
    raise SandboxUnavailable(f"python rewards need the reward jail, which cannot be built here: {missing}. "
                             f"On a single-tenant machine, {SETTING}=weak allows the weaker process sandbox.")
