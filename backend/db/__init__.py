"""Database layer: typed SQLAlchemy 2.0 models (schema made only by migrations/) and session helpers."""

from backend.db.base import Base
from backend.db.enums import ACTIVE_JOB_STATUSES, JOB_TRANSITIONS, InstanceStatus, JobStatus, Role
from backend.db.models import (
    ApiKey,
    Checkpoint,
    Dataset,
    GenerationInstance,
    Iteration,
    Job,
    JobEvent,
    JobSample,
    Membership,
    Model,
    Team,
    TimelineSpan,
    User,
    Worker,
)

__all__ = [
    "ACTIVE_JOB_STATUSES",
    "JOB_TRANSITIONS",
    "ApiKey",
    "Base",
    "Checkpoint",
    "Dataset",
    "GenerationInstance",
    "InstanceStatus",
    "Iteration",
    "Job",
    "JobEvent",
    "JobSample",
    "JobStatus",
    "Membership",
    "Model",
    "Role",
    "Team",
    "TimelineSpan",
    "User",
    "Worker",
]
