"""The sandbox worker: runs user reward code, one sample per request line. Stdlib only; started by sandbox.py as
`[unshare --net --] python -I sandbox_child.py` with the scratch dir as cwd.

Protocol (JSON lines): stdin line 1 is the config; the child answers {"ready": true, "protections": [...]} or
{"ready": false, "error": ...}. Then each request {"prompt", "response", "meta"} gets {"ok": true, "result": ...} or
{"ok": false, "error": ..., "restart": bool}. User prints go to stderr, never to the protocol stream.

Layers, in the order they are applied (each documented in docs of workers/rewards/sandbox.py):
  rlimits (address space, file size, no core files, per-call CPU time) -> drop root to `nobody` when root ->
  RLIMIT_NPROC=0 (no fork/threads; effective for non-root) -> audit hook refusing process creation, sockets, ctypes,
  writes outside the scratch dir and rlimit changes other than CPU time -> user code.
"""

import json
import os
import resource
import sys
import traceback

# imported before privileges drop so user code can use them even when the interpreter's stdlib is not world-readable
PRELOADED = ("math", "re", "json", "string", "collections", "itertools", "functools", "statistics", "random",
             "difflib", "unicodedata", "decimal", "fractions", "datetime", "textwrap", "operator", "heapq", "bisect")
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "subprocess", "multiprocessing", "_multiprocessing",
                   "socket", "_socket", "ssl", "_ssl", "pty", "fcntl", "mmap", "signal", "_signal", "threading",
                   "_thread", "concurrent", "asyncio", "select", "selectors"}
BLOCKED_EVENT_PREFIXES = ("os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.kill",
                          "os.killpg", "subprocess.", "socket.", "ctypes.", "signal.", "os.setuid", "os.setgid",
                          "os.chroot", "os.startfile", "_thread.", "mmap.", "sys.remote_exec")
WRITE_EVENTS = {"os.remove", "os.unlink", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.chmod", "os.chown",
                "os.link", "os.symlink", "os.truncate", "os.utime", "os.mkfifo", "os.mknod", "shutil.rmtree",
                "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move", "shutil.chown"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class SandboxViolation(PermissionError):
    pass


def _install_audit_hook(scratch: str) -> None:
    def inside_scratch(path: object) -> bool:
        if isinstance(path, int):  # an already-open descriptor
            return True
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        real = os.path.realpath(str(path))
        return real == scratch or real.startswith(scratch + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and not inside_scratch(path):
                raise SandboxViolation(f"sandbox: writing outside the scratch dir is not allowed ({path!r})")
        elif event in WRITE_EVENTS:
            for path in args[:2]:
                if isinstance(path, str | bytes) and not inside_scratch(path):
                    raise SandboxViolation(f"sandbox: {event} outside the scratch dir is not allowed ({path!r})")
        elif event == "import":
            if str(args[0]).split(".")[0] in BLOCKED_IMPORTS:
                what = "network access" if "socket" in str(args[0]) or "ssl" in str(args[0]) else "this module"
                raise SandboxViolation(f"sandbox: {what} is not allowed (import {args[0]})")
        elif event == "resource.setrlimit":
            if args[0] != resource.RLIMIT_CPU:
                raise SandboxViolation("sandbox: changing resource limits is not allowed")
        elif event.startswith(BLOCKED_EVENT_PREFIXES):
            kind = "network access" if event.startswith("socket.") else "process creation" \
                if event.startswith(("os.fork", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.")) \
                else event
            raise SandboxViolation(f"sandbox: {kind} is not allowed ({event})")

    sys.addaudithook(hook)


def _setup(config: dict) -> list[str]:
    protections = ["subprocess", "wall-timeout"]
    mb = int(config["memory_mb"])
    resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    lifetime = int(config["cpu_lifetime_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (lifetime, lifetime))
    protections += [f"rlimit-as={mb}MB", "rlimit-fsize=16MB", "rlimit-cpu"]
    if config.get("netns"):
        protections.append("network-namespace")
    for name in PRELOADED:
        __import__(name)
    if os.geteuid() == 0 and config.get("drop_uid") is not None:
        os.setgroups([])
        os.setgid(int(config["drop_gid"]))
        os.setuid(int(config["drop_uid"]))
        protections.append(f"uid={os.getuid()}")
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    if os.geteuid() != 0:
        protections.append("rlimit-nproc=0")
    for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED_IMPORTS]:
        del sys.modules[name]  # so that importing them again goes through the audit hook
    _install_audit_hook(os.path.realpath(os.getcwd()))
    protections.append("audit-hook")
    return protections


def _limit_cpu(per_call: int, lifetime: int) -> None:
    """Soft RLIMIT_CPU = CPU seconds used so far + per_call: the next call gets SIGXCPU past its share."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (min(spent + per_call, lifetime), lifetime))


def _error_text(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<reward>"]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _check_result(raw: object) -> object:
    if isinstance(raw, bool) or not isinstance(raw, int | float | dict):
        raise TypeError(f"reward() must return a float or a dict of floats, got {type(raw).__name__}")
    if isinstance(raw, dict):
        for key, val in raw.items():
            if not isinstance(key, str) or isinstance(val, bool) or not isinstance(val, int | float):
                raise TypeError(f"reward() dict must map str to float, got {key!r}: {type(val).__name__}")
    return raw


def main() -> None:
    proto_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # user prints go to the stderr log
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        proto_out.write(json.dumps(message) + "\n")
        proto_out.flush()

    config = json.loads(sys.stdin.readline())
    per_call = int(config["cpu_per_call_s"])
    try:
        protections = _setup(config)
        send({"loading": True})  # the parent now waits at most the per-call timeout for the code to load
        _limit_cpu(per_call, int(config["cpu_lifetime_s"]))
        namespace: dict = {"__name__": "reward_code"}
        exec(compile(config["code"], "<reward>", "exec"), namespace)
        reward = namespace.get("reward")
        if not callable(reward):
            raise NameError("the code must define a function reward(prompt, response, meta)")
    except BaseException as exc:  # anything the user code does at import time is its error, reported once
        send({"ready": False, "error": f"loading reward code failed: {_error_text(exc)}"})
        return
    send({"ready": True, "protections": protections})
    for line in sys.stdin:
        request = json.loads(line)
        _limit_cpu(per_call, int(config["cpu_lifetime_s"]))
        try:
            result = _check_result(reward(request["prompt"], request["response"], request["meta"]))
            send({"ok": True, "result": result})
        except MemoryError:
            send({"ok": False, "error": f"memory limit exceeded ({config['memory_mb']} MB)", "restart": True})
        except BaseException as exc:  # user code's failure is this sample's error
            send({"ok": False, "error": _error_text(exc), "restart": isinstance(exc, SystemExit | KeyboardInterrupt)})


if __name__ == "__main__":
    main()
