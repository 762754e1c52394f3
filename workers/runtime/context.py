"""What every runtime process knows about its job: the spec, the model directory, paths, Redis and the database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import redis

from backend.db import Job, JobStatus
from backend.db.session import session_scope
from backend.services.models import find_model
from contract import keys
from contract.settings import get_settings
from contract.spec import JobSpec
from contract.tasks import platform_redis_url


class JobSetupError(RuntimeError):
    """The job cannot run as specified (unknown model, unreadable dataset): the message says what to fix."""


@dataclass
class JobContext:
    job_id: int
    team_id: int
    spec: JobSpec
    model_dir: Path
    job_dir: Path  # <artifacts>/jobs/<id>: weights/, checkpoints/
    redis: redis.Redis

    @property
    def weights_dir(self) -> Path:
        return self.job_dir / "weights"

    @property
    def checkpoints_dir(self) -> Path:
        return self.job_dir / "checkpoints"

    def status(self) -> JobStatus:
        with session_scope() as session:
            job = session.get(Job, self.job_id)
            return JobStatus(job.status) if job is not None else JobStatus.cancelled

    def job_done(self) -> bool:
        return bool(self.redis.exists(keys.job_done(self.job_id)))


def resolve_model_dir(name: str, team_id: int) -> Path:
    """A registered model of the team by name, else an existing local model directory (train-local style)."""
    with session_scope() as session:
        model = find_model(session=session, team_id=team_id, name=name)
        if model is not None:
            return Path(model.path)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise JobSetupError(f"model {name!r} is not registered for this team and is not a model directory")


def load_context(job_id: int, client: redis.Redis | None = None) -> JobContext:
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise JobSetupError(f"job {job_id} does not exist")
        spec, team_id = JobSpec.model_validate(job.spec), job.team_id
    job_dir = get_settings().artifacts / "jobs" / str(job_id)
    job_dir.mkdir(parents=True, exist_ok=True)
    return JobContext(job_id=job_id, team_id=team_id, spec=spec, model_dir=resolve_model_dir(spec.model, team_id),
                      job_dir=job_dir, redis=client or redis.Redis.from_url(platform_redis_url()))
