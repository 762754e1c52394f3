"""The harness for user code: reward code (one sample per request) or an environment (`kind: environment`: one
reset or step per request, workers/environments/base.py). Stdlib only; started by sandbox.py as
`python -I -S sandbox_child.py REQ_FD REPLY_FD`, inside the bwrap jail (mode `jail`) or as a plain process (`weak`).

Protocol: length-prefixed JSON frames (4-byte big-endian length) on two private pipes, never on stdout/stderr
(those carry user prints to the parent, which keeps a bounded tail). The first request is the config; every request
carries a fresh nonce from the parent and the harness echoes it, so bytes user code writes to the reply pipe cannot
be taken for a later sample's answer (the parent restarts the worker on any stray or mismatched frame).
Replies: {"loading"} then {"ready": true} or {"ready": false, "error"}; per sample {"ok": true, "result"} or
{"ok": false, "error", "restart"}.

Order of setup: (jail, as root) drop to the jail uid -> RLIMIT_NPROC=0 and the per-call CPU limit -> (weak only)
an audit hook refusing process creation, sockets, ctypes and writes outside the scratch dir -> user code.
In `jail` mode the audit hook is not installed: the kernel is the boundary, not Python.
"""

import json
import os
import resource
import sys
import traceback

# imported before privileges drop (weak mode) so user code can use them when the stdlib is not world-readable
PRELOADED = ("math", "re", "json", "string", "collections", "itertools", "functools", "statistics", "random",
             "difflib", "unicodedata", "decimal", "fractions", "datetime", "textwrap", "operator", "heapq", "bisect")
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "_posixsubprocess", "subprocess", "multiprocessing", "_multiprocessing",
                   "socket", "_socket", "ssl", "_ssl", "pty", "fcntl", "mmap", "signal", "_signal", "threading",
                   "_thread", "concurrent", "asyncio", "select", "selectors", "gc"}
BLOCKED_EVENT_PREFIXES = ("os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.kill",
                          "os.killpg", "subprocess.", "socket.", "ctypes.", "signal.", "os.setuid", "os.setgid",
                          "os.chroot", "os.startfile", "_thread.", "mmap.", "sys.remote_exec", "gc.")
WRITE_EVENTS = {"os.remove", "os.unlink", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.chmod", "os.chown",
                "os.link", "os.symlink", "os.truncate", "os.utime", "os.mkfifo", "os.mknod", "shutil.rmtree",
                "shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.move", "shutil.chown"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _install_audit_hook(scratch: str) -> None:
    """Weak mode only. A Python audit hook is not a security boundary (C code and interpreter tricks get past it)."""

    def inside_scratch(path: object) -> bool:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not os.path.isabs(path):
            return False  # descriptors and relative paths (dir_fd) are refused for writes
        real = os.path.realpath(path)
        return real == scratch or real.startswith(scratch + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS)
            if writing and not inside_scratch(os.path.join(scratch, path) if isinstance(path, str) else path):
                raise PermissionError(f"sandbox: writing outside the scratch dir is not allowed ({path!r})")
        elif event in WRITE_EVENTS:
            for path in args[:2]:
                if isinstance(path, str | bytes) and not inside_scratch(os.path.join(scratch, os.fsdecode(path))):
                    raise PermissionError(f"sandbox: {event} outside the scratch dir is not allowed ({path!r})")
            if any(isinstance(a, int) and a != -100 for a in args[2:]):  # dir_fd other than AT_FDCWD
                raise PermissionError(f"sandbox: {event} with dir_fd is not allowed")
        elif event == "import":
            if str(args[0]).split(".")[0] in BLOCKED_IMPORTS:
                raise PermissionError(f"sandbox: import {args[0]} is not allowed")
        elif event == "resource.setrlimit":
            if args[0] != resource.RLIMIT_CPU:  # the harness moves the CPU limit per call
                raise PermissionError("sandbox: changing resource limits is not allowed")
        elif event.startswith(BLOCKED_EVENT_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")

    for name in [m for m in sys.modules if m.split(".")[0] in BLOCKED_IMPORTS]:
        del sys.modules[name]  # so that importing them again goes through the audit hook
    sys.addaudithook(hook)


class Wire:
    def __init__(self, req_fd: int, reply_fd: int):
        self.req_fd, self.reply_fd, self.nonce = req_fd, reply_fd, ""

    def _read_exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = os.read(self.req_fd, size - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    def receive(self) -> dict:
        message = json.loads(self._read_exact(int.from_bytes(self._read_exact(4), "big")))
        self.nonce = message.pop("nonce")
        return message

    def send(self, message: dict) -> None:
        payload = json.dumps({**message, "nonce": self.nonce}, allow_nan=False).encode()
        data = len(payload).to_bytes(4, "big") + payload
        while data:
            data = data[os.write(self.reply_fd, data):]


def _drop_privileges(uid: int) -> None:
    for name in PRELOADED:
        __import__(name)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _limit_cpu(per_call: int, lifetime: int) -> None:
    """Soft RLIMIT_CPU = CPU seconds used so far + per_call: the call gets SIGXCPU past its share."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (min(spent + per_call, lifetime), lifetime))


def _error_text(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in ("<reward>", "<environment>")]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:1000]


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a float, got {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        raise ValueError(f"{what} is too large to be a float") from None
    if result != result or result in (float("inf"), float("-inf")):
        raise ValueError(f"{what} must be finite, got {result}")
    return result


def _check_result(raw: object) -> object:
    if isinstance(raw, dict):
        if not all(isinstance(key, str) for key in raw):
            raise TypeError("reward() dict must map str to float")
        return {key: _number(val, f"reward() dict value {key!r}") for key, val in raw.items()}
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise TypeError(f"reward() must return a float or a dict of floats, got {type(raw).__name__}")
    return _number(raw, "reward()")


def _load(config: dict) -> dict:
    """Run the user's code; the callables it must define for its kind (raises what the code raised)."""
    kind = config.get("kind", "reward")
    namespace: dict = {"__name__": f"{kind}_code"}
    exec(compile(config["code"], f"<{kind}>", "exec"), namespace)
    if kind == "environment":
        reset, step = namespace.get("reset"), namespace.get("step")
        if not callable(reset) or not callable(step):
            raise NameError("the code must define functions reset(row) and step(messages, row)")
        tools = namespace.get("TOOLS", namespace.get("tools"))
        json.dumps(tools, allow_nan=False)  # tools must be plain JSON
        code = getattr(step, "__code__", None)
        takes_row = code is None or code.co_argcount >= 2 or bool(code.co_flags & 0x04)  # 0x04: *args
        return {"reset": reset, "step": step, "tools": tools, "step_takes_row": takes_row}
    reward = namespace.get("reward")
    if not callable(reward):
        raise NameError("the code must define a function reward(prompt, response, meta)")
    return {"reward": reward}


def _serve(kind: str, loaded: dict, request: dict) -> object:
    if kind == "environment":
        if request.get("op") == "tools":
            return loaded["tools"]
        if request.get("op") == "reset":
            return loaded["reset"](request["row"])
        if loaded["step_takes_row"]:
            return loaded["step"](request["messages"], request["row"])
        return loaded["step"](request["messages"])
    return _check_result(loaded["reward"](request["prompt"], request["response"], request["meta"]))


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    wire = Wire(int(sys.argv[1]), int(sys.argv[2]))
    config = wire.receive()
    if config.get("drop_uid") is not None:
        _drop_privileges(int(config["drop_uid"]))
    per_call, lifetime = int(config["cpu_per_call_s"]), int(config["cpu_lifetime_s"])
    kind = config.get("kind", "reward")
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no fork, no threads
    if config["mode"] == "weak":
        _install_audit_hook(os.path.realpath(os.getcwd()))
    try:
        wire.send({"loading": True})  # the parent now waits at most the per-call timeout for the code to load
        _limit_cpu(per_call, lifetime)
        loaded = _load(config)
    except BaseException as exc:  # anything the user code does at import time is its error, reported once
        wire.send({"ready": False, "error": f"loading {kind} code failed: {_error_text(exc)}"})
        return
    wire.send({"ready": True})
    while True:
        try:
            request = wire.receive()
        except EOFError:
            return
        _limit_cpu(per_call, lifetime)
        try:
            wire.send({"ok": True, "result": _serve(kind, loaded, request)})
        except MemoryError:
            wire.send({"ok": False, "error": f"memory limit exceeded ({config['memory_mb']} MB)", "restart": True})
        except BaseException as exc:  # user code's failure is this call's error (a result that is not JSON too)
            restart = isinstance(exc, SystemExit | KeyboardInterrupt)
            wire.send({"ok": False, "error": _error_text(exc), "restart": restart})


if __name__ == "__main__":
    main()
