"""The harness of an agent's jail (workers/agents/jailed.py starts it): it loads the agent's code once, then runs up
to `agent.episodes_per_jail` episodes of one lane one after another. Stdlib only; run as
`python -I -S /harness/sandbox_child.py REPLY_FD`; on stdin JSON lines: the load (code, limits), sent when the jail
starts, then one line per episode (task, key), each sent when the jail is given that episode (jailed.py
`AgentJail`).

1. (as root) drop to the jail uid; the CPU-time limit of the load.
2. A loopback forwarder: 127.0.0.1:PORT in the jail's own network namespace, each connection relayed byte for byte to
   the unix socket bound in at GATEWAY_SOCKET, whose other end (outside, workers/agents/relay.py) answers only the
   gateway of the episode running now. The agent's `base_url` is http://127.0.0.1:PORT/v1 in every episode.
3. The packages dir (the agent's requirements, bound read-only) on sys.path; the user's code loaded (its imports)
   before any episode is known.
4. Per episode: the CPU soft limit set to the CPU used so far plus the episode's `cpu_s` (SIGXCPU ends the jail, and
   with it only this episode, "CPU time limit exceeded"), SIGXCPU's default action and the cwd (the scratch)
   restored, `run(task, base_url, api_key)` called (awaited when it is a coroutine function), then one JSON line on
   REPLY_FD: {"seq", "ok": true, "reward": number | null, "retire": why | null} or {"seq", "ok": false, "error"}
   (`seq`: the episode line's, so that a line the agent wrote there itself puts the jail out of step). `retire` names
   what makes the jail unfit for another episode: Python threads the episode left running (other than the
   harness's forwarder and pumps), CPU past the episode's limit (SIGXCPU caught), a scratch that could not be
   wiped. Otherwise the scratch is wiped before the reply, and the harness waits for the next episode; after a
   failed or retired episode it exits.
"""

import asyncio
import contextlib
import inspect
import json
import math
import os
import resource
import selectors
import shutil
import signal
import socket
import stat
import sys
import threading
import time
import traceback

GATEWAY_SOCKET = "/gateway.sock"
PACKAGES = "/agent-packages"
CHUNK = 65536
THREAD_GRACE_S = 1.0  # how long an episode's own threads get to finish after run() returned
_OWN: set[int] = set()  # idents of the harness's threads (forwarder, pumps): not the agent's


def _pump(client: socket.socket, upstream: socket.socket) -> None:
    """Relay both ways until either side closes."""
    _OWN.add(threading.get_ident())
    selector = selectors.DefaultSelector()
    selector.register(client, selectors.EVENT_READ, upstream)
    selector.register(upstream, selectors.EVENT_READ, client)
    try:
        open_ends = 2
        while open_ends:
            for key, _ in selector.select():
                source, target = key.fileobj, key.data
                data = source.recv(CHUNK)  # type: ignore[union-attr]
                if not data:
                    selector.unregister(source)
                    open_ends -= 1
                    try:
                        target.shutdown(socket.SHUT_WR)
                    except OSError:
                        open_ends = 0
                    continue
                target.sendall(data)
    except OSError:
        pass
    finally:
        selector.close()
        client.close()
        upstream.close()
        _OWN.discard(threading.get_ident())


def _forward(server: socket.socket) -> None:
    _OWN.add(threading.get_ident())
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(GATEWAY_SOCKET)
        except OSError:
            client.close()
            continue
        threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()


def _start_forwarder() -> int:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    threading.Thread(target=_forward, args=(server,), daemon=True).start()
    return int(server.getsockname()[1])


def _error_text(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<agent>"]
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"[:1000]


def _reward(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"run() must return a number or None, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"run() must return a finite number, got {result}")
    return result


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _stray_threads() -> list[str]:
    """The Python threads other than the main one and the harness's own still alive after THREAD_GRACE_S (threads
    started through `_thread` too: `sys._current_frames` has every thread with a Python state)."""
    deadline = time.monotonic() + THREAD_GRACE_S
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and thread.ident not in _OWN and not isinstance(thread, threading._DummyThread):
            thread.join(max(0.0, deadline - time.monotonic()))
    names = {t.ident: t.name for t in threading.enumerate()}
    idents = set(sys._current_frames()) - _OWN - {main.ident}
    return sorted(names.get(ident, f"thread {ident}") for ident in idents)


def _wipe(scratch: str) -> str | None:
    """Empty the scratch dir (files the episode wrote must not reach the next); why not, if it could not."""
    def retry(function, path, _exc):  # a dir the agent made unreadable or unwritable: its own, so chmod it back
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path)
        else:
            os.unlink(path)

    try:
        os.chdir(scratch)
        for entry in os.scandir(scratch):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, onerror=retry)
            else:
                os.unlink(entry.path)
        left = os.listdir(scratch)
    except OSError as exc:
        return f"the scratch could not be wiped: {exc}"
    return f"the scratch could not be wiped: {left[:3]}" if left else None


def _episode(namespace: dict, loaded: BaseException | None, episode: dict, port: int) -> dict:
    try:
        if loaded is not None:
            raise loaded
        run = namespace.get("run")
        if not callable(run):
            raise NameError("the code must define run(task, base_url, api_key)")
        result = run(episode["task"], f"http://127.0.0.1:{port}/v1", episode["api_key"])
        if inspect.iscoroutine(result):  # async def run
            result = asyncio.run(result)
        return {"ok": True, "reward": _reward(result)}
    except BaseException as exc:  # the agent's failure is this episode's error
        return {"ok": False, "error": _error_text(exc)}


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    reply_fd = int(sys.argv[1])
    config = json.loads(sys.stdin.readline())  # the load: code, limits (the episodes come later)

    def reply(message: dict) -> None:
        for stream in (sys.stdout, sys.stderr):  # what the episode printed comes before its reply
            with contextlib.suppress(Exception):  # the agent may have closed or replaced it
                stream.flush()
        data = json.dumps(message, allow_nan=False).encode() + b"\n"
        while data:
            data = data[os.write(reply_fd, data):]

    if config.get("drop_uid") is not None:
        os.setgroups([])
        os.setgid(int(config["drop_uid"]))
        os.setuid(int(config["drop_uid"]))
    # CPU seconds: `cpu` for loading the code, then `cpu` more for each episode (set when it comes: a jail started
    # ahead must not spend an episode's budget on its imports). The soft limit's SIGXCPU ends an agent that burns it
    # ("CPU time limit exceeded", not a lost jail); the hard limit (SIGKILL), sized by jailed.py for the load and
    # every episode, only one that ignores SIGXCPU (its episode's wall clock ends it first).
    cpu, hard, scratch = int(config["cpu_s"]), int(config["cpu_hard_s"]), config["scratch"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
    if os.path.isdir(PACKAGES):
        sys.path.insert(0, PACKAGES)
    # The SDK's trace export (to api.openai.com) can never reach it from here; its worker thread would only retire
    # every jail after its first episode (a thread left running).
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    loaded: BaseException | None = None
    namespace: dict = {"__name__": "agent_code"}
    try:
        port = _start_forwarder()
        exec(compile(config["code"], "<agent>", "exec"), namespace)  # its imports, before its episodes are known
    except BaseException as exc:  # reported as the episode's error once an episode comes
        loaded = exc
    while True:
        line = sys.stdin.readline()
        if not line:  # no more episodes (the jail is retired or the instance stopped)
            os._exit(0)
        episode = json.loads(line)
        soft = min(int(_cpu_used()) + 1 + cpu, hard - 1)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)
        os.chdir(scratch)
        message = {"seq": episode["seq"], **_episode(namespace, loaded, episode, port)}
        if message["ok"]:
            stray = _stray_threads()
            if stray:
                message["retire"] = f"threads left running: {', '.join(stray)[:300]}"
            elif _cpu_used() >= soft:
                message["retire"] = "CPU past the episode's limit (SIGXCPU caught)"
            else:
                message["retire"] = _wipe(scratch)
        reply(message)
        if not message["ok"] or message["retire"]:
            os._exit(0)  # daemon threads (the forwarder, the agent's own) end with the process


if __name__ == "__main__":
    main()
