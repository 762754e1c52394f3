"""All ORM models; importing this package registers every table on `Base.metadata`."""

from backend.db.models.alerts import AlertDelivery, AlertRule
from backend.db.models.assets import Dataset, Model
from backend.db.models.deployments import Deployment
from backend.db.models.evaluations import Evaluation
from backend.db.models.fleet import GenerationInstance, Worker
from backend.db.models.jobs import Checkpoint, Iteration, Job, JobEvent
from backend.db.models.security import LoginFailure, RevokedSession
from backend.db.models.telemetry import JobSample, TimelineSpan
from backend.db.models.tenancy import ApiKey, Invitation, InvitationStatus, Membership, Team, User
from backend.db.models.trackers import TrackerCredential, TrackerRun
from backend.db.models.usage import UsageRecord

__all__ = [
    "AlertDelivery",
    "AlertRule",
    "ApiKey",
    "Checkpoint",
    "Dataset",
    "Deployment",
    "Evaluation",
    "GenerationInstance",
    "Invitation",
    "InvitationStatus",
    "Iteration",
    "Job",
    "JobEvent",
    "JobSample",
    "LoginFailure",
    "Membership",
    "Model",
    "RevokedSession",
    "Team",
    "TimelineSpan",
    "TrackerCredential",
    "TrackerRun",
    "UsageRecord",
    "User",
    "Worker",
]
