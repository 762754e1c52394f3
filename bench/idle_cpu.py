"""Idle CPU of the whole platform: `streamrl up` (API, controller, workers, embedded Redis) with no job.

    python bench/idle_cpu.py                  # settle 20 s, measure 60 s
    python bench/idle_cpu.py --window 60 --settle 20 --database-url postgresql://...

Starts `streamrl up` in a fresh data directory (SQLite unless --database-url) on a free port, waits until it says it
is running and the workers registered, lets it settle, then reads utime + stime of every process in its tree from
/proc/<pid>/stat once a second over the window (processes that start or end inside the window count for the part
they ran). Prints the busiest processes and
    RESULT idle_cpu_pct_of_core=X wakeups_per_s=Y window_s=W processes=N
where X is the tree's CPU seconds / window seconds x 100 (100 = one core busy) and Y its context switches per
second (all threads): the polling rate, steadier than CPU time on a loaded machine. Stops the platform at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from backend.embedded_redis import _PID_FILE as EMBEDDED_REDIS_PID_FILE

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds user + system) of a live process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def process_tree(*roots: int) -> dict[int, float]:
    """pid -> CPU seconds of the `roots` and all their descendants."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                parents[int(entry)], cpu[int(entry)] = stat
    tree, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return {pid: cpu[pid] for pid in tree if pid in cpu}


def wakeups(pid: int) -> int:
    """Context switches of all the process's threads so far: a polling loop shows as a steady rate of them, a
    figure that (unlike CPU time) does not grow when other load slows the machine."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if "ctxt_switches:" in line:
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def name_of(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    for marker in ("up", "controller", "worker", "uvicorn", "redis-server"):
        for index, word in enumerate(words):
            if word.endswith(marker):
                return " ".join(Path(w).name if i == 0 else w for i, w in enumerate(words[index : index + 3]))
    return " ".join(Path(w).name for w in words[:3])


def redis_pids(data_dir: Path) -> list[int]:
    pid_file = data_dir / "redis" / EMBEDDED_REDIS_PID_FILE
    return [int(pid_file.read_text().strip())] if pid_file.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after start-up before measuring")
    parser.add_argument("--database-url", default="", help="default: SQLite in the fresh data directory")
    parser.add_argument("--top", type=int, default=12, help="busiest processes to list")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamrl-idle-") as data_dir:
        env = {**os.environ, "STREAMRL_DATA_DIR": data_dir, "STREAMRL_CONFIG": str(Path(data_dir) / "cli.json")}
        env.pop("STREAMRL_REDIS_URL", None)
        if args.database_url:
            env["STREAMRL_DATABASE_URL"] = args.database_url
        else:
            env.pop("STREAMRL_DATABASE_URL", None)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "streamrl.cli.main", "up", "--port", str(port), "--data-dir", data_dir],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        lines: deque[str] = deque(maxlen=200)
        running = threading.Event()

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line.rstrip())
                if "StreamRL is running" in line:
                    running.set()

        threading.Thread(target=read, daemon=True).start()
        try:
            deadline = time.time() + 180
            while not running.wait(0.5):
                if process.poll() is not None or time.time() > deadline:
                    raise SystemExit("streamrl up did not come up:\n" + "\n".join(lines))
            time.sleep(args.settle)
            # the embedded redis-server daemonizes (not a descendant of `up`): its pid file names it
            roots = [process.pid, *redis_pids(Path(data_dir))]
            first = process_tree(*roots)
            last, started = dict(first), time.time()
            seen_first = dict(first)
            names = {pid: name_of(pid) for pid in first}
            switches_first = {pid: wakeups(pid) for pid in first}
            switches_last = dict(switches_first)
            while time.time() - started < args.window:
                time.sleep(1.0)
                now = process_tree(*roots)
                for pid, seconds in now.items():
                    if pid not in seen_first:  # started inside the window: all of its time counts
                        seen_first[pid], names[pid], switches_first[pid] = 0.0, name_of(pid), 0
                    last[pid], switches_last[pid] = seconds, wakeups(pid)
            elapsed = time.time() - started
        finally:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        used = {pid: last[pid] - seen_first[pid] for pid in last}
        print(f"{len(used)} processes; busiest over {elapsed:.0f} s:")
        switched = {pid: switches_last.get(pid, 0) - switches_first.get(pid, 0) for pid in used}
        for pid, seconds in sorted(used.items(), key=lambda item: -item[1])[: args.top]:
            print(f"  {100 * seconds / elapsed:6.2f}% {switched[pid] / elapsed:7.1f} wakeups/s  pid {pid} {names[pid]}")
        total = sum(used.values())
        rate = sum(switched.values()) / elapsed
        print(
            f"RESULT idle_cpu_pct_of_core={100 * total / elapsed:.2f} wakeups_per_s={rate:.1f} "
            f"window_s={elapsed:.0f} processes={len(used)}"
        )


if __name__ == "__main__":
    main()
