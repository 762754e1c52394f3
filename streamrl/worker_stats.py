"""What a Celery worker reports about itself beside its slots (streamrl/worker.py's registry thread): the tasks it runs
now (which jobs hold it) and a resource sample every beat, kept in Redis for the cluster page (`keys.worker_samples`).

A sample: {at, cpu_percent (the worker's process tree, 100 = one core), memory_mb (its RSS), host_memory_percent,
and per GPU of the worker's device sets where `nvidia-smi` answers: gpus [{index, util_percent, memory_mb}]}.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import psutil
import redis

from contract import keys, tasks

SAMPLES_KEPT = 360  # 30 min at one sample per 5 s beat
SAMPLES_TTL_S = 3600


class ProcessTreeSampler:
    """CPU and memory of a process and its children (the prefork pool), measured between two calls."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.known: dict[int, psutil.Process] = {}

    def sample(self) -> dict[str, Any]:
        cpu = rss = 0.0
        alive: dict[int, psutil.Process] = {}
        for proc in [self.root, *self.root.children(recursive=True)]:
            proc = self.known.get(proc.pid, proc)  # the same object keeps its last CPU reading
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            alive[proc.pid] = proc
        self.known = alive
        return {"at": time.time(), "cpu_percent": round(cpu, 1), "memory_mb": round(rss / 2**20, 1),
                "host_memory_percent": psutil.virtual_memory().percent}


def gpu_stats(indices: set[int]) -> list[dict[str, float]]:
    """Utilisation and memory of the listed GPUs from `nvidia-smi` (none where it is missing or fails)."""
    if not indices or shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    stats = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and int(parts[0]) in indices:
            stats.append({"index": int(parts[0]), "util_percent": float(parts[1]), "memory_mb": float(parts[2])})
    return stats


def active_tasks() -> list[dict[str, Any]]:
    """The runtime tasks this worker runs now: {task, job_id, instance_id | rank} (read in the main process)."""
    from celery.worker import state

    out: list[dict[str, Any]] = []
    for request in list(state.active_requests):
        args = list(request.args or [])
        if not args:
            continue
        entry: dict[str, Any] = {"task": request.name, "job_id": args[0]}
        if request.name == tasks.RUN_INSTANCE and len(args) > 1:
            entry["instance_id"] = args[1]
        if request.name == tasks.RUN_RANK and len(args) > 2:
            entry["rank"] = args[2]
        out.append(entry)
    return out


def push_sample(client: redis.Redis, node: str, sample: dict[str, Any]) -> None:
    key = keys.worker_samples(node)
    with client.pipeline() as pipe:
        pipe.lpush(key, json.dumps(sample))
        pipe.ltrim(key, 0, SAMPLES_KEPT - 1)
        pipe.expire(key, SAMPLES_TTL_S)
        pipe.execute()
