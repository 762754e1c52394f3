"""The dashboard's view of a team's Tinker sessions (docs/tinker.md#on-the-dashboard): who made each training client,
on which base model, its steps, its last call, whether it is parked, its checkpoints (with expiry and
user_metadata) and, in detail, its loss and step time per step.

    list_sessions(session, team, artifacts)            # newest first
    session_detail(session, team, artifacts, job_id)   # + every step (404 for another team's or a non-tinker job)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import ApiKey, Iteration, Job, JobEvent, Team, User
from backend.services import tinker as tinker_service
from backend.services.errors import NotFound
from contract.spec import JobSpec

CREATED_EVENT = "tinker"  # the creation event carries data {"tinker": "created", "user_metadata": {...}}
MAX_SESSIONS = 200


def _user_metadata(session: Session, job_id: int) -> dict[str, str] | None:
    for data in session.scalars(select(JobEvent.data).where(JobEvent.job_id == job_id,
                                                            JobEvent.kind == CREATED_EVENT)):
        if isinstance(data, dict) and data.get("tinker") == "created":
            return data.get("user_metadata")
    return None


def _summary(session: Session, job: Job, artifacts: Path) -> dict[str, Any]:
    spec = JobSpec.model_validate(job.spec)
    owner = session.get(User, job.created_by_id) if job.created_by_id else None
    key = session.get(ApiKey, job.created_by_key_id) if job.created_by_key_id else None
    steps, last_step = session.execute(select(func.max(Iteration.iteration), func.max(Iteration.created_at))
                                       .where(Iteration.job_id == job.id)).one()
    last_event = session.scalar(select(func.max(JobEvent.created_at)).where(JobEvent.job_id == job.id))
    moments = [m for m in (last_step, last_event, job.started_at) if m is not None]
    return {"job_id": job.id, "model_id": job.name, "owner": owner.email if owner else None,
            "api_key": key.name if key else None, "base_model": spec.model,
            "lora_rank": spec.training.lora.rank if spec.training.lora else None, "status": str(job.status),
            "parked": job.status == JobStatus.parked, "steps": int(steps or 0),
            "last_call": max(moments) if moments else None, "user_metadata": _user_metadata(session, job.id),
            "checkpoints": tinker_service.list_checkpoints(session, job, artifacts)}


def list_sessions(session: Session, team: Team, artifacts: Path) -> list[dict[str, Any]]:
    jobs = [job for job in session.scalars(select(Job).where(Job.team_id == team.id).order_by(Job.id.desc()))
            if tinker_service.is_tinker_job(job)][:MAX_SESSIONS]
    return [_summary(session, job, artifacts) for job in jobs]


def session_detail(session: Session, team: Team, artifacts: Path, job_id: int) -> dict[str, Any]:
    job = session.get(Job, job_id)
    if job is None or job.team_id != team.id or not tinker_service.is_tinker_job(job):
        raise NotFound(f"tinker session {job_id} not found")
    rows = session.scalars(select(Iteration).where(Iteration.job_id == job.id).order_by(Iteration.iteration))
    series = [{"step": row.iteration, "loss": row.metrics.get("loss"), "step_seconds": row.metrics.get("step_seconds"),
               "tokens": row.metrics.get("tokens"), "at": row.created_at} for row in rows]
    return {**_summary(session, job, artifacts), "steps_series": series}
