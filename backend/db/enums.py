"""Status and role enums, and the job state machine: the one place allowed transitions are written down."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    queued = "queued"
    starting = "starting"
    running = "running"
    paused = "paused"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


# queued -> starting -> running <-> paused -> succeeded | failed | cancelled
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: frozenset({JobStatus.starting, JobStatus.cancelled, JobStatus.failed}),
    JobStatus.starting: frozenset({JobStatus.running, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.running: frozenset({JobStatus.paused, JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.paused: frozenset({JobStatus.running, JobStatus.cancelled, JobStatus.failed}),
    JobStatus.succeeded: frozenset(),
    JobStatus.failed: frozenset(),
    JobStatus.cancelled: frozenset(),
}
TERMINAL_JOB_STATUSES = frozenset(s for s, targets in JOB_TRANSITIONS.items() if not targets)
# Jobs that hold resources and count against the `max_concurrent_jobs` quota (a paused job has released them).
ACTIVE_JOB_STATUSES = frozenset({JobStatus.starting, JobStatus.running})


def can_transition(current: JobStatus, to: JobStatus) -> bool:
    return to in JOB_TRANSITIONS[current]


class Role(StrEnum):
    viewer = "viewer"
    member = "member"
    admin = "admin"
    owner = "owner"

    @property
    def rank(self) -> int:
        return _ROLE_RANK[self]

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


_ROLE_RANK = {Role.viewer: 0, Role.member: 1, Role.admin: 2, Role.owner: 3}


class InstanceStatus(StrEnum):
    starting = "starting"
    running = "running"
    stopping = "stopping"
    stopped = "stopped"
    dead = "dead"


LIVE_INSTANCE_STATUSES = frozenset({InstanceStatus.starting, InstanceStatus.running})
