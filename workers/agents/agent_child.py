"""The harness of one agent episode inside the jail (workers/agents/jailed.py starts it). Stdlib only; run as
`python -I -S /harness/sandbox_child.py REPLY_FD`; on stdin two JSON lines: the load (code, limits), sent when
the jail starts, and the episode (task, key), sent when the jail is given one (jailed.py `AgentJail`).

1. (as root) drop to the jail uid; the CPU-time limit of the episode.
2. A loopback forwarder: 127.0.0.1:PORT in the jail's own network namespace, each connection relayed byte for byte to
   the unix socket bound in at GATEWAY_SOCKET, whose other end (outside, workers/agents/relay.py) answers only this
   episode's gateway. The agent's `base_url` is http://127.0.0.1:PORT/v1.
3. The packages dir (the agent's requirements, bound read-only) on sys.path; the user's code loaded (its imports)
   before the episode is known; then, given the episode, `run(task, base_url, api_key)` called (awaited when it is a
   coroutine function).
4. One JSON reply on REPLY_FD: {"ok": true, "reward": number | null} or {"ok": false, "error"}.
"""

import asyncio
import inspect
import json
import math
import os
import resource
import selectors
import socket
import sys
import threading
import traceback

GATEWAY_SOCKET = "/gateway.sock"
PACKAGES = "/agent-packages"
CHUNK = 65536


def _pump(client: socket.socket, upstream: socket.socket) -> None:
    """Relay both ways until either side closes."""
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


def _forward(server: socket.socket) -> None:
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


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    reply_fd = int(sys.argv[1])
    config = json.loads(sys.stdin.readline())  # the load: code, limits (the episode comes later)

    def reply(message: dict) -> None:
        data = json.dumps(message, allow_nan=False).encode()
        while data:
            data = data[os.write(reply_fd, data):]
        os.close(reply_fd)

    if config.get("drop_uid") is not None:
        os.setgroups([])
        os.setgid(int(config["drop_uid"]))
        os.setuid(int(config["drop_uid"]))
    # CPU seconds: `cpu` for loading the code, then `cpu` more for the episode (set when it comes: a jail started
    # ahead must not spend the episode's budget on its imports). The soft limit's SIGXCPU ends an agent that burns
    # it ("CPU time limit exceeded", not a lost jail); the hard limit (SIGKILL) only one that ignores SIGXCPU.
    cpu = int(config["cpu_s"])
    hard = 2 * cpu + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, hard))
    if os.path.isdir(PACKAGES):
        sys.path.insert(0, PACKAGES)
    loaded: BaseException | None = None
    namespace: dict = {"__name__": "agent_code"}
    try:
        port = _start_forwarder()
        exec(compile(config["code"], "<agent>", "exec"), namespace)  # its imports, before its episode is known
    except BaseException as exc:  # reported as the episode's error once the episode comes
        loaded = exc
    line = sys.stdin.readline()
    if not line:  # never given an episode (the instance stopped)
        os._exit(0)
    episode = json.loads(line)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    resource.setrlimit(resource.RLIMIT_CPU, (min(int(usage.ru_utime + usage.ru_stime) + 1 + cpu, hard - 1), hard))
    try:
        if loaded is not None:
            raise loaded
        run = namespace.get("run")
        if not callable(run):
            raise NameError("the code must define run(task, base_url, api_key)")
        args = (episode["task"], f"http://127.0.0.1:{port}/v1", episode["api_key"])
        result = run(*args)
        if inspect.iscoroutine(result):  # async def run
            result = asyncio.run(result)
        reply({"ok": True, "reward": _reward(result)})
    except BaseException as exc:  # the agent's failure is this episode's error
        reply({"ok": False, "error": _error_text(exc)})
    sys.stdout.flush()
    os._exit(0)  # daemon threads (the forwarder, the agent's own) end with the process


if __name__ == "__main__":
    main()
