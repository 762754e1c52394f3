"""A shared training process (`training.run_shared`): the drivers of several LoRA jobs on one base model, in one
process and one training slot (docs/operator.md#shared-training-processes).

The controller places the driver of each job with `training.share: true` on a shared training process of its base
model (backend/controller/sharing.py `place_driver`: {job_id} appended to `keys.share_joins(key)`, this task sent
when no process serves the key). Each placed driver runs here in a thread exactly as `training.run_job` runs it
alone (workers/runtime/job.py): its own trainer (adapter, optimizer, lr schedule), weight versions, checkpoints,
heartbeat and records, so everything per job stays per job. What the drivers share is the process: one Python and
torch runtime, one mapping of the frozen base weights (workers/models/shared_base.py maps a file once per process),
one slot, and the slot's cores.

Invariants:
- drivers set up one at a time (`_SETUP`): a trainer seeds torch's global RNG and initialises its adapter under that
  seed, so a job starts from the same adapter as alone;
- a driver that fails fails its job only (run_job records why); the process and the other drivers go on;
- a driver killed with the process (kill -9, OOM) is a lost driver like any other: the controller restarts it from
  its newest checkpoint, on the same key (`keys.driver_share`);
- the process exits when it held no driver for idle_s, atomically with an empty joins list (`ShareState`);
- its state says how many more drivers its memory takes (`MemoryRoom`): the controller places no driver on a
  process with no room, nor more than STREAMRL_SHARED_TRAINING_JOBS.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import redis

from contract import keys
from contract.reporter import Reporter
from contract.states import JobStatus
from workers.runtime.components import worker_device
from workers.runtime.job import run_job
from workers.runtime.share_state import ShareState
from workers.runtime.shutdown import ShutdownWatch

log = logging.getLogger(__name__)
IDLE_S = float(os.environ.get("STREAMRL_SHARED_IDLE_S", "30"))  # exit after this long with no driver
JOIN_BLOCK_S = 1.0  # how long one wait for a placement blocks
RETRY_S = 1.0  # a placement that could not start (the database or Redis out) is tried again after this long
_SETUP = threading.Lock()  # one driver of the process sets up (seeds and initialises its trainer) at a time


class SharedTrainingProcess:
    def __init__(self, client: redis.Redis, key: str, reporter: Reporter, artifacts: Path, *, node: str | None,
                 idle_s: float = IDLE_S) -> None:
        self.client, self.key, self.reporter, self.artifacts = client, key, reporter, artifacts
        self.node, self.idle_s = node, idle_s
        self.drivers: list[tuple[int, threading.Thread]] = []  # (job id, its driver's thread), alive or ending
        self.served = 0
        self.memory = MemoryRoom(worker_device())
        self.state = ShareState(client, key, node, lambda: sorted(job_id for job_id, _ in self.drivers),
                                extra=lambda: {"room": self.memory.room(len(self.drivers))})
        self.shutdown = ShutdownWatch(client, node)

    def serve(self) -> str:
        state = self.state.start()
        idle_since = time.monotonic()
        try:
            while not self.shutdown.check():
                self.drivers = [(job_id, thread) for job_id, thread in self.drivers if thread.is_alive()]
                popped = self.client.blpop([keys.share_joins(self.key)], timeout=JOIN_BLOCK_S)
                if popped is not None:
                    try:
                        self._join(int(json.loads(popped[1])["job_id"]))
                    except Exception:  # the database or Redis is out: the placement waits for the next try
                        log.exception("shared training process %s: cannot start a placed driver", self.key)
                        self.client.lpush(keys.share_joins(self.key), popped[1])
                        self.shutdown.requested.wait(RETRY_S)
                if self.drivers:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= self.idle_s and state.exit_if_no_joins():
                    break
            else:  # the worker is shutting down: its drivers hand their jobs back; later placements go elsewhere
                state.stop()
                self.client.delete(keys.share_state(self.key))
        finally:
            state.stop()
            for _, thread in self.drivers:
                thread.join()
        return f"shared training process {self.key} stopped after running {self.served} drivers"

    def _join(self, job_id: int) -> None:
        record = self.reporter.load_job(job_id)
        if record is None:
            return
        if not record.spec.shares_training:
            self.reporter.set_job_status(job_id, JobStatus.failed, error=(
                f"job {job_id} was placed on a shared training process but does not share training: "
                f"{record.spec.training_share_refusal or 'training.share is false'}"))
            return
        # a restarted driver (new epoch) may meet its predecessor here: that one stops as superseded
        thread = threading.Thread(target=self._drive, args=(job_id,), name=f"driver-{job_id}", daemon=True)
        self.drivers.append((job_id, thread))
        self.served += 1
        self.reporter.record_event(job_id, "training_sharing", (
            f"driver runs in shared training process {self.key} (pid {os.getpid()}): one copy of the base model "
            f"for the {len(self.drivers)} LoRA jobs' drivers in it now, each with its own adapter, optimizer and "
            "checkpoints"), {"shared_training": self.key, "drivers": len(self.drivers)})
        thread.start()

    def _drive(self, job_id: int) -> None:
        try:
            outcome = run_job(job_id, self.reporter, self.client, self.artifacts, node=self.node, setup_lock=_SETUP)
            log.info("shared training process %s: %s", self.key, outcome)
        except Exception:  # run_job records what it can; a driver's crash never takes the other drivers down
            log.exception("shared training process %s: the driver of job %s failed", self.key, job_id)


class MemoryRoom:
    """How many more drivers this process's memory takes ("when memory allows"): the free memory of its device (a
    GPU's free memory; on CPU the host's MemAvailable) over what one driver has cost here, i.e. the memory the
    process grew by since it started serving, per driver. It counts the first driver's share of the runtime
    (torch, transformers) too, so it errs on the side of fewer drivers. None before the first driver."""

    HEADROOM = 0.8  # of the free memory, drivers may take this share

    def __init__(self, device: str) -> None:
        self.device = device
        self.start = self.used()

    def used(self) -> int:
        if self.device.startswith("cuda"):
            import torch

            return int(torch.cuda.memory_reserved(self.device)) if torch.cuda.is_initialized() else 0
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def free(self) -> int:
        if self.device.startswith("cuda"):
            import torch

            return int(torch.cuda.mem_get_info(self.device)[0]) if torch.cuda.is_initialized() else 0
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        return 0

    def room(self, drivers: int) -> int | None:
        if drivers == 0:
            return None
        per_driver = max(1, (self.used() - self.start) // drivers)
        return int(self.free() * self.HEADROOM // per_driver)


def run_shared_training(key: str, reporter: Reporter, client: redis.Redis, artifacts: Path, *,
                        node: str | None, **options: Any) -> str:
    """The `training.run_shared` task body."""
    return SharedTrainingProcess(client, key, reporter, artifacts, node=node, **options).serve()
