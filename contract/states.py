"""Job and generation-instance states: the names both the control plane and the runtime use.

The job state machine (which transitions are allowed) lives with the control plane (`backend/db/enums.py`); the
runtime only asks for transitions through its `Reporter`.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    queued = "queued"
    starting = "starting"
    running = "running"
    paused = "paused"
    parked = "parked"  # a Tinker training session with no call for a while: no process, no slot (docs/tinker.md)
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL_JOB_STATUSES = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})


class InstanceStatus(StrEnum):
    starting = "starting"  # asked for; no worker has picked it up yet
    running = "running"
    stopping = "stopping"  # asked to stop: finishes what it admitted, then exits
    stopped = "stopped"
    dead = "dead"  # declared dead by the controller (silent past the heartbeat timeout)


LIVE_INSTANCE_STATUSES = frozenset({InstanceStatus.starting, InstanceStatus.running})
