"""Disposable Redis and PostgreSQL servers a fault test may stop and restart (the machine's shared ones stay up)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {timeout_s}s")


class PrivateRedis:
    def __init__(self, workdir: Path):
        self.dir, self.port = workdir, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.dir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: redis.Redis(port=self.port).ping(), 15, "redis-server")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


class PrivatePostgres:
    """A cluster of its own (initdb), run as the `postgres` user when the tests run as root. Its files live in a
    directory of their own under the system temp dir (pytest's are private to root, so `postgres` cannot enter)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="streamrl-pg-"))
        self.dir, self.port = self.root / "pgdata", free_port()
        self.sockets = self.root / "pgsock"
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        self.bin = Path(bins[-1]) if bins else Path(os.path.dirname(shutil.which("pg_ctl") or "/usr/bin/pg_ctl"))
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=120)

    def init(self) -> None:
        for path in (self.dir, self.sockets):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(path, "postgres", "postgres")
                shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.dir), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir), "-w", "-t", "60", "-l", str(self.dir.parent / "pg.log"), "-o",
                  f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir), "-w", "-m", "fast", "stop")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def restart(self, down_s: float) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()
