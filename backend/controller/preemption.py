"""A preempted job's return to the queue, once its driver handed it back (backend/services/admission.py flags it,
workers/runtime/shutdown.py `preemption_due` hands back at the next checkpoint)."""

from __future__ import annotations

import json

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES
from backend.services.jobs import record_event, transition_job
from contract import keys


def requeue_preempted(session: Session, job: Job, client: redis.Redis) -> bool:
    """running -> queued for a job the scheduler preempted and whose driver handed it back; its instances stop and
    the next admission continues it from the checkpoint in a new driver epoch. False when it was not preempted."""
    raw = client.get(keys.job_preempt(job.id))
    if raw is None or job.status != JobStatus.running:
        return False
    reason = str(json.loads(raw)["reason"])
    for inst in session.scalars(select(GenerationInstance).where(
            GenerationInstance.job_id == job.id, GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES))):
        inst.status = InstanceStatus.stopping
        client.set(keys.instance_stop(job.id, inst.instance_id), 1, ex=86400)
    job.driver_epoch += 1
    transition_job(session=session, job=job, to=JobStatus.queued)
    record_event(session=session, job_id=job.id, kind="scheduler",
                 message=f"back in the queue at iteration {job.current_iteration} ({reason}); it resumes from its "
                         "newest checkpoint when the scheduler admits it again",
                 data={"scheduler": "preempted", "iteration": job.current_iteration})
    client.delete(keys.job_preempt(job.id), keys.driver_handback(job.id), keys.driver_lost_at(job.id),
                  keys.driver_sent(job.id), keys.driver_seen(job.id), keys.driver_unknown_since(job.id))
    return True
