"""A real `mlflow server` on 127.0.0.1 for the tracker tests: its own SQLite store and artifact directory, stoppable
and restartable on the same port (the outage test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
from waiting import free_port, wait_until


class MlflowServer:
    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
        log = (self.root / "mlflow.log").open("ab")
        self.proc = subprocess.Popen(
            [mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--artifacts-destination", str(self.root / "artifacts")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._healthy, 120, f"mlflow server ({self.log()})")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"mlflow server exited: {self.log()}")
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        import os
        import signal

        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None

    def log(self) -> str:
        path = self.root / "mlflow.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""
