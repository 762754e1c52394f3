"""What every runtime process knows about its job: the spec, the model directory, paths, Redis and the reporter.

The control plane is reached only through `ctx.reporter` (contract.reporter): the runtime never opens a database
session. `redis` is None for train-local, which runs the colocated driver in one process with no services.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis

from contract import keys
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.datasets import local_dataset
from contract.artifact_store.models import local_model
from contract.reporter import Reporter
from contract.rewards.model_graders import model_refs
from contract.spec import JobSpec
from contract.states import JobStatus


class JobSetupError(RuntimeError):
    """The job cannot run as specified (unknown model, unreadable dataset): the message says what to fix."""


class HostMissing(JobSetupError):
    """This worker's host lacks a piece the job needs (the reward jail): the job fails at once with this message
    (it names the piece and its fix) instead of its tasks failing one by one."""


@dataclass
class JobContext:
    job_id: int
    team_id: int
    spec: JobSpec
    model_dir: Path
    job_dir: Path  # <artifacts>/jobs/<id> (or train-local's output dir): weights/, checkpoints/
    reporter: Reporter
    redis: Redis | None
    dataset_path: str | None = None  # the uploaded dataset's file, when the spec names one by id
    dataset_params: dict[str, Any] = field(default_factory=dict)  # built-in task generator params (train-local)
    epoch: int = 0  # the driver epoch: part of every request id (workers/core/prompts.py)
    node: str | None = None  # the Celery worker running this task (its shutdown flag: workers/runtime/shutdown.py)
    recorded_through: int | None = None  # the newest iteration whose row is recorded (None: unknown)
    grader_models: dict[str, Path] = field(default_factory=dict)  # the reward's judge / reward models: name -> dir
    base_cache: Path | None = None  # the host's shared frozen weights (workers/models/shared_base.py); None: private
    teacher_dir: Path | None = None  # algorithm.teacher's model directory (distill), None without a teacher

    @property
    def weights_dir(self) -> Path:
        return self.job_dir / "weights"

    @property
    def checkpoints_dir(self) -> Path:
        return self.job_dir / "checkpoints"

    def status(self) -> JobStatus:
        return self.reporter.job_status(self.job_id) or JobStatus.cancelled  # a deleted job is over

    def job_done(self) -> bool:
        return self.redis is not None and bool(self.redis.exists(keys.job_done(self.job_id)))

    def require_redis(self) -> Redis:
        assert self.redis is not None, "this part of the runtime needs the platform's Redis"
        return self.redis


def resolve_model_dir(name: str, registered: str | None) -> Path:
    """The team's registered model of that name, else an existing local model directory (train-local style)."""
    if registered is not None:
        return Path(registered)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path.resolve()
    raise JobSetupError(f"model {name!r} is not registered for this team and is not a model directory")


def resolve_grader_models(spec: JobSpec, registered: Mapping[str, str]) -> dict[str, Path]:
    """The directories of the judge / reward models the spec's grading reward names (`reward`, or an environment's
    `grader`): registered in the team, else (train-local) local model directories."""
    refs = model_refs(spec.grading[0]) if spec.grading else []
    return {name: resolve_model_dir(name, registered.get(name)) for _, _, name in refs}


def resolve_teacher(spec: JobSpec, registered: str | None) -> Path | None:
    """algorithm.teacher's directory: registered in the team, else (train-local) a local model directory."""
    name = spec.algorithm.teacher
    return resolve_model_dir(name, registered) if name else None


def load_context(job_id: int, reporter: Reporter, client: Redis | None, artifacts: Path,
                 node: str | None = None) -> JobContext:
    record = reporter.load_job(job_id)
    if record is None:
        raise JobSetupError(f"job {job_id} does not exist")
    if record.spec.dataset.id is not None and record.dataset_path is None:
        raise JobSetupError(f"dataset {record.spec.dataset.id} not found in this team")
    job_dir = artifacts / "jobs" / str(job_id)
    job_dir.mkdir(parents=True, exist_ok=True)
    dataset_path = record.dataset_path
    if dataset_path is not None and record.spec.dataset.id is not None:  # a host without the shared volume
        try:
            dataset_path = str(local_dataset(record.team_id, record.spec.dataset.id, Path(dataset_path), artifacts))
        except (ArtifactStoreError, FileNotFoundError) as err:
            raise JobSetupError(f"dataset {record.spec.dataset.id} cannot be read from the artifact store: "
                                f"{err}") from err
    model_path = record.model_path
    if model_path is not None:  # an uploaded model on a host without the shared volume: from the store
        try:
            model_path = str(local_model(record.team_id, Path(model_path), artifacts))
        except (ArtifactStoreError, FileNotFoundError) as err:
            raise JobSetupError(f"model {record.spec.model!r} cannot be read from the artifact store: {err}") from err
    return JobContext(job_id=job_id, team_id=record.team_id, spec=record.spec,
                      model_dir=resolve_model_dir(record.spec.model, model_path), job_dir=job_dir,
                      reporter=reporter, redis=client, dataset_path=dataset_path, epoch=record.epoch, node=node,
                      recorded_through=record.recorded_through,
                      grader_models=resolve_grader_models(record.spec, record.grader_models),
                      teacher_dir=resolve_teacher(record.spec, record.teacher_path),
                      base_cache=base_weights_cache(artifacts))


def base_weights_cache(artifacts: Path) -> Path | None:
    """Where training processes of this host share frozen base weights; STREAMRL_SHARE_BASE_WEIGHTS=0 turns it off
    (each process then holds a private copy)."""
    if os.environ.get("STREAMRL_SHARE_BASE_WEIGHTS", "1") == "0":
        return None
    return artifacts / "cache" / "base-weights"
