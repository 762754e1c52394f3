"""Clean shutdown of a worker: its running tasks hand their work back instead of finishing it. The scheduler's
preemption (`keys.job_preempt`) uses the same hand-back, at the job's next checkpoint.

A Celery worker's main process sets `keys.worker_shutdown(node)` when a warm shutdown begins (SIGTERM/SIGINT);
the task processes check it with every heartbeat (`ShutdownWatch.check`). A driver then checkpoints and exits
without finishing the job (`HandBack`), an instance stops admitting requests and exits; the controller restarts
both when workers are back.
"""

from __future__ import annotations

import json
import threading
import time

import redis

from contract import keys


class HandBack(Exception):  # noqa: N818 - a control-flow signal, not an error
    """The worker is shutting down: stop at the next safe point without marking the job finished."""


class ShutdownWatch:
    def __init__(self, client: redis.Redis | None, node: str | None):
        self.client, self.node = client, node
        self.requested = threading.Event()

    def check(self) -> bool:
        if (not self.requested.is_set() and self.client is not None and self.node
                and self.client.exists(keys.worker_shutdown(self.node))):
            self.requested.set()
        return self.requested.is_set()


def preemption_due(client: redis.Redis | None, job_id: int, trained: int, interval: int) -> str | None:
    """Why the driver must hand the job back now: the scheduler flagged it and it has just checkpointed (`trained`
    is a multiple of the checkpoint interval) or the flag's deadline (its grace period) has passed; else None."""
    raw = client.get(keys.job_preempt(job_id)) if client is not None else None
    if raw is None:
        return None
    flag = json.loads(raw)
    if (trained > 0 and trained % max(1, interval) == 0) or time.time() >= float(flag["deadline"]):
        return str(flag["reason"])
    return None
