"""`streamrl up` on a fresh data dir (embedded SQLite + embedded Redis): serves, bootstraps, stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from backend.client import StreamRLClient

from .conftest import free_port

pytestmark = pytest.mark.integration


def _start_up(data_dir: Path, port: int, config: Path, *extra: str) -> subprocess.Popen[str]:
    """`streamrl up --port PORT` (with `--no-workers` unless `extra` says `--workers`) in its own session."""
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMRL_DATABASE_URL", "STREAMRL_REDIS_URL")}
    env.update(STREAMRL_CONFIG=str(config), STREAMRL_DATA_DIR=str(data_dir))
    args = [a for a in extra if a != "--workers"] if "--workers" in extra else ["--no-workers", *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "streamrl.cli.main", "up", "--port", str(port), *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _wait_healthy(proc: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[0]
        try:
            if httpx.get(f"{url}/api/v1/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("streamrl up did not serve /api/v1/health in time")


def _wait_bootstrapped(config: Path, url: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if config.exists() and url in json.loads(config.read_text()).get("tokens", {}):
            return str(json.loads(config.read_text())["tokens"][url])
        time.sleep(0.1)
    raise AssertionError("the CLI was not logged in by the first-run bootstrap")


def _both_pools_registered(url: str, token: str) -> bool:
    """Both pools' Celery workers have booted: each wrote its registry entry, which GET /cluster lists."""
    answer = httpx.get(f"{url}/api/v1/cluster", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    pools = {pool for worker in answer.json().get("workers", []) for pool in worker["pools"]}
    return answer.status_code == 200 and {"generation", "training"} <= pools


def _family(proc: subprocess.Popen[str], data_dir: Path) -> list[psutil.Process]:
    """`up`'s descendants plus the embedded redis-server (which daemonizes, so it is not a descendant)."""
    redis_pid = int((data_dir / "redis" / "server.pid").read_text())
    return [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(redis_pid)]


def _all_gone(processes: list[psutil.Process]) -> bool:
    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    return all(gone(p) for p in processes)


def _stop(proc: subprocess.Popen[str], sig: signal.Signals) -> str:
    proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return out


def test_up_serves_health_and_stops_on_sigint(tmp_path: Path) -> None:
    data_dir, config, port = tmp_path / "data", tmp_path / "config.json", free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_up(data_dir, port, config)
    try:
        _wait_healthy(proc, url)
        token = _wait_bootstrapped(config, url)
        family = _family(proc, data_dir)
        assert len(family) >= 2  # the API and redis-server at least
        assert httpx.get(f"{url}/api/v1/ready", timeout=5).json() == {"database": "ok", "redis": "ok"}
        with StreamRLClient(url, token) as api:
            assert api.me()["role"] == "owner"
        creds = json.loads((data_dir / "admin.json").read_text())
        second = _start_up(data_dir, free_port(), tmp_path / "other-config.json")  # same data dir: refused
        second_out, _ = second.communicate(timeout=60)
        assert second.returncode == 1
        assert second_out.strip() == (f"error: another `streamrl up` (pid {proc.pid}) is using {data_dir}; "
                                      "stop it or pass --data-dir")
        assert oct((data_dir / "admin.json").stat().st_mode & 0o777) == "0o600"
        assert (data_dir / "streamrl.db").exists()
    finally:
        out = _stop(proc, signal.SIGINT)
    assert proc.returncode == 0, out
    assert "up: stopped" in out and creds["password"] in out and "Traceback" not in out
    deadline = time.monotonic() + 10
    while not _all_gone(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _all_gone(family), [p.pid for p in family]


@pytest.mark.slow
def test_restart_reuses_the_owner_and_stops_on_sigterm(tmp_path: Path) -> None:
    data_dir, config, port = tmp_path / "data", tmp_path / "config.json", free_port()
    url = f"http://127.0.0.1:{port}"
    for attempt in range(2):
        config.unlink(missing_ok=True)
        proc = _start_up(data_dir, port, config)
        try:
            _wait_healthy(proc, url)
            _wait_bootstrapped(config, url)
            family = _family(proc, data_dir)
        finally:
            out = _stop(proc, signal.SIGTERM)
        assert proc.returncode == 0, out
        assert ("created the owner account" in out) == (attempt == 0), out
        assert ("CLI logged in as admin@streamrl.local" in out) == (attempt == 1), out
        deadline = time.monotonic() + 10
        while not _all_gone(family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _all_gone(family)


def test_busy_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data_dir, config = tmp_path / "data", tmp_path / "config.json"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _start_up(data_dir, port, config)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert out.strip().splitlines() == [f"error: cannot listen on 127.0.0.1:{port} (Address already in use); "
                                        "is another server using it? pass --port"]
    assert not (data_dir / "redis").exists()


@pytest.mark.slow
def test_up_with_controller_and_workers_stops_cleanly(tmp_path: Path) -> None:
    data_dir, config, port = tmp_path / "data", tmp_path / "config.json", free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_up(data_dir, port, config, "--workers")
    try:
        _wait_healthy(proc, url)
        token = _wait_bootstrapped(config, url)
        deadline = time.monotonic() + 120
        while not _both_pools_registered(url, token) and time.monotonic() < deadline:  # the workers have booted
            time.sleep(0.2)
        family = _family(proc, data_dir)
        names = " ".join(" ".join(p.cmdline()) for p in family)
        assert "controller" in names and "--pool generation" in names and "--pool training" in names
    finally:
        out = _stop(proc, signal.SIGINT)
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out[max(out.find("Traceback") - 1500, 0):][:5000]
    deadline = time.monotonic() + 10
    while not _all_gone(family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _all_gone(family)


@pytest.mark.slow
def test_up_restarted_mid_job_continues_the_job(tmp_path: Path) -> None:
    """Ctrl-C of `streamrl up` while a job runs hands the job back (checkpoint, no end marker); the next `up`
    restarts its driver from that checkpoint and the job completes with every iteration recorded once."""
    from workers.models import build_tiny_model

    data_dir, config, port = tmp_path / "data", tmp_path / "config.json", free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_up(data_dir, port, config, "--workers")
    iterations = 40  # long enough that the stop lands mid-job
    try:
        _wait_healthy(proc, url)
        api = StreamRLClient(url, token=_wait_bootstrapped(config, url))
        build_tiny_model("tiny-1m", data_dir / "artifacts" / "models" / "tiny", seed=0)
        api.register_model("tiny", "models/tiny")
        job = api.submit_job({
            "name": "restart-me", "model": "tiny", "mode": "sync", "dataset": {"builtin": "arithmetic"},
            "algorithm": {"group_size": 4}, "generation": {"instances": 1, "max_tokens": 8, "batch_size": 16},
            "training": {"iterations": iterations, "prompts_per_iteration": 4, "micro_batch_size": 8},
            "checkpoint": {"interval": 1}})
        deadline = time.monotonic() + 240
        while api.get_job(job["id"])["progress"]["iteration"] < 2:
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.5)
    finally:
        out = _stop(proc, signal.SIGINT)
    assert proc.returncode == 0, out
    assert api_job_status_offline(data_dir, job["id"]) == "running"  # handed back, not finished

    proc = _start_up(data_dir, port, config, "--workers")
    try:
        _wait_healthy(proc, url)
        deadline = time.monotonic() + 300
        while (state := api.get_job(job["id"]))["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"the job did not finish after the restart: {state}"
            time.sleep(1.0)
        assert state["status"] == "succeeded", state
        rows = api.job_iterations(job["id"])["data"]
        events = [e["message"] for e in api.job_events(job["id"], limit=500)["data"]]
        assert [r["iteration"] for r in rows] == list(range(1, iterations + 1)), events
        assert all(r["metrics"]["samples"] == 16 for r in rows)
        assert any("handed the job back" in e for e in events), events
    finally:
        _stop(proc, signal.SIGINT)


def api_job_status_offline(data_dir: Path, job_id: int) -> str:
    """The job's status read straight from the embedded SQLite database (the platform is down)."""
    import sqlite3

    with sqlite3.connect(data_dir / "streamrl.db") as conn:
        return str(conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0])
