"""Roles, and the job state machine: the one place allowed transitions are written down (states: `contract.states`)."""

from __future__ import annotations

from enum import StrEnum

from contract.states import (  # noqa: F401 - the control plane's names for them
    LIVE_INSTANCE_STATUSES,
    TERMINAL_JOB_STATUSES,
    InstanceStatus,
    JobStatus,
)

# queued -> starting -> running <-> paused -> succeeded | failed | cancelled
# Tinker sessions also park: running -> parked (state on disk, no slot) -> queued (a call arrived) | ended;
# starting -> parked when a session's worker is lost while it restores
# Preemption (backend/scheduler): running -> queued once the driver handed the job back at a checkpoint
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: frozenset({JobStatus.starting, JobStatus.cancelled, JobStatus.failed}),
    JobStatus.starting: frozenset({JobStatus.running, JobStatus.parked, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.running: frozenset({JobStatus.paused, JobStatus.parked, JobStatus.queued, JobStatus.succeeded,
                                  JobStatus.failed, JobStatus.cancelled}),
    JobStatus.parked: frozenset({JobStatus.queued, JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}),
    JobStatus.paused: frozenset({JobStatus.running, JobStatus.cancelled, JobStatus.failed}),
    JobStatus.succeeded: frozenset(),
    JobStatus.failed: frozenset({JobStatus.queued}),  # resume: continue from the newest checkpoint
    JobStatus.cancelled: frozenset(),
}
# Terminal = the job is over (its processes exit); of those, only a failed job may be resumed by a user.
assert {s for s, targets in JOB_TRANSITIONS.items() if not targets} == TERMINAL_JOB_STATUSES - {JobStatus.failed}
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
