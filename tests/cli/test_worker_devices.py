"""`streamrl worker --devices`: one task process per device set, each pinned to its set, and the sets in the worker
registry the controller reads capacity from."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import redis
from waiting import environ_snapshot, wait_until

from contract import keys

REPO = Path(__file__).resolve().parents[2]


def test_worker_pins_one_process_per_device_set(redis_url: str, tmp_path: Path) -> None:
    env = {**environ_snapshot(), "STREAMRL_REDIS_URL": redis_url, "STREAMRL_DATA_DIR": str(tmp_path),
           "STREAMRL_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}", "STREAMRL_DEVICE": "cpu",
           "PYTHONPATH": str(REPO)}
    bad = subprocess.run([sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", "generation", "--devices",
                          "0;0"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "device 0 is in sets 1 and 2" in bad.stdout + bad.stderr
    proc = subprocess.Popen([sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", "generation",
                             "--devices", "0;1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    client = redis.Redis.from_url(redis_url)
    try:
        entry = None
        deadline = time.monotonic() + 90
        while entry is None and time.monotonic() < deadline:
            found = list(client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN))
            entry = json.loads(client.get(found[0]) or "null") if found else None
            time.sleep(0.5)
        assert entry is not None, "the worker never registered"
        assert entry["slots"] == 2 and entry["devices"] == ["0", "1"] and entry["device_kind"] == "cpu"

        def pinned() -> list[tuple[int, ...]] | None:  # each task process pins itself as it starts
            children = psutil.Process(proc.pid).children()
            sets = sorted(tuple(sorted(child.cpu_affinity())) for child in children)
            return sets if sets == [(0,), (1,)] else None

        assert len(psutil.Process(proc.pid).children()) == 2
        wait_until(pinned, 60, "both task processes pinned to their device sets")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        client.close()
