"""A seccomp-BPF deny list for the reward jail, compiled by libseccomp (Debian `libseccomp2`) through ctypes.

Why libseccomp and not a PyPI binding: the maintained binding (libseccomp's own `seccomp` module, Debian
`python3-seccomp`) is built for the system Python only, and `pyseccomp` (ctypes, last release 2021) is unmaintained;
libseccomp itself is maintained, installed on every Debian system (apt depends on it) and resolves syscall names per
architecture. We call five of its functions and hand the compiled program to `bwrap --seccomp FD`.

The filter is a deny list on top of the namespaces (the real boundary): it removes kernel surface a reward never
needs. Denied calls fail with EPERM (clone3 with ENOSYS so libc falls back to clone, which is filtered on its flags);
a syscall of a foreign architecture (32-bit entry points) kills the process (libseccomp's default for a bad arch).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from functools import cache

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
NAMESPACE_FLAGS = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000)  # CLONE_NEW*
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

# Never needed by a reward: sockets (no network in the jail; AF_VSOCK is not namespaced), namespaces and mounts,
# tracing other processes, kernel keyrings, eBPF, perf, io_uring, module and clock administration.
DENIED = (
    "socket", "socketpair", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "pidfd_open", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "name_to_handle_at",
    "open_by_handle_at", "personality", "acct", "swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "syslog", "quotactl", "lookup_dcookie", "vhangup", "uselib",
    "ustat", "sysfs", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm",
    "sethostname", "setdomainname", "fanotify_init", "memfd_secret", "mbind", "migrate_pages", "move_pages",
    "set_mempolicy", "landlock_create_ruleset",
)


# `agent` filters (workers/agents/): the agent reaches its episode's gateway through a loopback forwarder and a bound
# unix socket, so these socket families stay open (the jail's network namespace has nothing else); everything else
# in DENIED stays denied, and no new process may start (fork, vfork, clone without CLONE_THREAD): threads only.
AGENT_SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6
MAX_FAMILY = 64  # AF_MAX is below this on every kernel
CLONE_THREAD = 0x00010000
SCMP_CMP_EQ, SCMP_CMP_GE = 4, 5


class SeccompUnavailable(RuntimeError):
    pass


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@cache
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp is not installed (apt-get install libseccomp2): {exc}") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


@cache
def deny_filter(agent: bool = False) -> bytes:
    """The compiled BPF program (struct sock_filter array) for this machine's architecture. `agent`: the agent
    jail's variant (local sockets allowed, no new processes)."""
    lib = _library()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        def add(name: str, action: int, *conds: _ArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                return  # not a syscall on this architecture
            array = (_ArgCmp * len(conds))(*conds) if conds else None
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(conds), array)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp rule for {name} failed: {os.strerror(-rc)}")

        eperm = _errno_action(errno.EPERM)
        for name in DENIED:
            if agent and name in ("socket", "socketpair"):
                continue
            add(name, eperm)
        if agent:
            for family in range(MAX_FAMILY):
                if family not in AGENT_SOCKET_FAMILIES:
                    add("socket", _errno_action(errno.EAFNOSUPPORT), _ArgCmp(0, SCMP_CMP_EQ, family, 0))
            add("socket", _errno_action(errno.EAFNOSUPPORT), _ArgCmp(0, SCMP_CMP_GE, MAX_FAMILY, 0))
            for name in ("fork", "vfork"):
                add(name, eperm)
            add("clone", eperm, _ArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0))
        add("clone3", _errno_action(errno.ENOSYS))
        for flag in NAMESPACE_FLAGS:
            add("clone", eperm, _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        for request in (TIOCSTI, TIOCLINUX):  # no typing into a terminal (bwrap --new-session also prevents it)
            add("ioctl", eperm, _ArgCmp(1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, request))
        memfd = os.memfd_create("streamrl-seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, memfd)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            size = os.lseek(memfd, 0, os.SEEK_CUR)
            return os.pread(memfd, size, 0)
        finally:
            os.close(memfd)
    finally:
        lib.seccomp_release(ctx)
