"""The reconcile loop: drive the running world towards the desired state kept in the database.

One pass (`reconcile_once`):
1. admit queued jobs within their team's quotas, and send each admitted job's driver task (`training.run_job`);
2. fail jobs whose driver never started or stopped heart-beating, with an error that says what to do;
3. per active job: mark silent instances dead, run the autoscaler for `auto` jobs, start instances up to the
   target and stop the surplus (a stop flag the instance checks between requests);
4. paused and finished jobs: stop their instances.
Every decision that changes a job is a JobEvent. Instances are numbered `gen-<k>`, never reused within a job.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import redis
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from backend.controller.scaling import desired_instances
from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES, TERMINAL_JOB_STATUSES
from backend.db.session import session_scope
from backend.services.jobs import admit_queued_jobs, record_event, transition_job
from contract import keys, liveness, tasks
from contract.liveness import Timeouts
from contract.spec import JobSpec
from contract.tasks import make_celery, platform_redis_url


class TaskSender(Protocol):
    def start_driver(self, job_id: int) -> None: ...

    def start_instance(self, job_id: int, instance_id: str) -> str: ...


class CeleryTaskSender:
    """Sends the runtime's tasks by name, so the control plane never imports the (torch) worker code."""

    def __init__(self, redis_url: str | None = None) -> None:
        self.app = make_celery(redis_url)

    def start_driver(self, job_id: int) -> None:
        self.app.send_task(tasks.RUN_JOB, args=[job_id])

    def start_instance(self, job_id: int, instance_id: str) -> str:
        return str(self.app.send_task(tasks.RUN_INSTANCE, args=[job_id, instance_id]).id)


@dataclass
class ReconcileReport:
    admitted: list[int] = field(default_factory=list)
    drivers_started: list[int] = field(default_factory=list)
    instances_started: list[str] = field(default_factory=list)
    instances_stopped: list[str] = field(default_factory=list)
    instances_dead: list[str] = field(default_factory=list)
    jobs_failed: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite returns naive datetimes


def reconcile_once(
    *, sender: TaskSender | None = None, client: redis.Redis | None = None, timeouts: Timeouts | None = None,
    engine: Engine | None = None,
) -> ReconcileReport:
    """One pass; defaults: the configured database, Redis and Celery broker."""
    sender = sender or CeleryTaskSender()
    client = client or redis.Redis.from_url(platform_redis_url())
    timeouts = timeouts or Timeouts.from_env()
    report = ReconcileReport()
    with session_scope(engine) as session:
        for job in admit_queued_jobs(session=session):
            report.admitted.append(job.id)
    with session_scope(engine) as session:
        jobs = session.scalars(select(Job).where(Job.status.in_([JobStatus.starting, JobStatus.running,
                                                                   JobStatus.paused]))).all()
        for job in jobs:
            _reconcile_job(session, job, sender, client, timeouts, report)
        _stop_instances_of_finished_jobs(session, client, report)
    return report


def _reconcile_job(session: Session, job: Job, sender: TaskSender, client: redis.Redis, timeouts: Timeouts,
                   report: ReconcileReport) -> None:
    if job.status == JobStatus.paused:
        _scale_to(session, job, [], 0, sender, client, report)
        return
    if liveness.mark_driver_sent(client, job.id):
        sender.start_driver(job.id)
        report.drivers_started.append(job.id)
        record_event(session=session, job_id=job.id, kind="worker", message="training driver task sent")
    if _driver_lost(client, job, timeouts):
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, _driver_lost_message(job, timeouts))
    # a stopping instance finishes its admitted requests and exits (status stopped); one that goes silent meanwhile
    # is dead, so the driver re-dispatches what its stream still holds
    instances = list(session.scalars(select(GenerationInstance).where(
        GenerationInstance.job_id == job.id,
        GenerationInstance.status.in_([*LIVE_INSTANCE_STATUSES, InstanceStatus.stopping]))))
    silent = [inst for inst in instances if _silent(inst, timeouts, report)]
    live = [inst for inst in instances if inst not in silent and inst.status in LIVE_INSTANCE_STATUSES]
    for inst in instances:
        if inst in silent:
            inst.status, inst.stopped_at = InstanceStatus.dead, _now()
            client.set(keys.instance_stop(job.id, inst.instance_id), 1, ex=86400)
            record_event(session=session, job_id=job.id, kind="worker",
                         message=f"instance {inst.instance_id} stopped heart-beating; replacing it",
                         data={"instance_id": inst.instance_id})
    spec = JobSpec.model_validate(job.spec)
    target = 0 if spec.mode == "colocated" else desired_instances(session, job, spec, live)
    _scale_to(session, job, live, target, sender, client, report)


def _silent(inst: GenerationInstance, timeouts: Timeouts, report: ReconcileReport) -> bool:
    now = _now()
    if inst.heartbeat_at is None:
        silent = now - _aware(inst.started_at) > timedelta(seconds=timeouts.instance_start_s)
    else:
        silent = now - _aware(inst.heartbeat_at) > timedelta(seconds=timeouts.instance_heartbeat_s)
    if silent:
        report.instances_dead.append(inst.instance_id)
    return silent


def _scale_to(session: Session, job: Job, live: list[GenerationInstance], target: int, sender: TaskSender,
              client: redis.Redis, report: ReconcileReport) -> None:
    live = sorted(live, key=lambda inst: inst.id)
    for inst in live[target:]:  # the newest go first
        inst.status = InstanceStatus.stopping
        client.set(keys.instance_stop(job.id, inst.instance_id), 1, ex=86400)
        report.instances_stopped.append(inst.instance_id)
        record_event(session=session, job_id=job.id, kind="scale", message=f"stopping instance {inst.instance_id}",
                     data={"instance_id": inst.instance_id, "target": target})
    for _ in range(target - len(live)):
        instance_id = _next_instance_id(session, job.id)
        inst = GenerationInstance(job_id=job.id, instance_id=instance_id, status=InstanceStatus.starting)
        session.add(inst)
        session.commit()  # the row must be visible before the task can run, or the task finds no row and exits
        inst.celery_task_id = sender.start_instance(job.id, instance_id)
        report.instances_started.append(instance_id)
        record_event(session=session, job_id=job.id, kind="scale", message=f"starting instance {instance_id}",
                     data={"instance_id": instance_id, "target": target})


def _next_instance_id(session: Session, job_id: int) -> str:
    names = session.scalars(select(GenerationInstance.instance_id).where(GenerationInstance.job_id == job_id)).all()
    used = [int(n.split("-")[1]) for n in names if n.startswith("gen-") and n.split("-")[1].isdigit()]
    return f"gen-{max(used, default=-1) + 1}"


def _driver_lost(client: redis.Redis, job: Job, timeouts: Timeouts) -> bool:
    if liveness.driver_alive(client, job.id):
        return False
    if job.status == JobStatus.running:
        return True  # a running job's driver beats every few seconds
    sent = liveness.driver_sent_at(client, job.id)
    return sent is not None and time.time() - sent > timeouts.driver_start_s


def _driver_lost_message(job: Job, timeouts: Timeouts) -> str:
    if job.status == JobStatus.running:
        return (f"the training worker running this job stopped responding (no heartbeat for "
                f"{timeouts.driver_heartbeat_ttl_s:.0f}s); resubmit the job to restart it")
    return (f"no training worker picked this job up within {timeouts.driver_start_s:.0f}s; start one with "
            "`streamrl worker --pool training`")


def _fail(session: Session, job: Job, client: redis.Redis, error: str) -> None:
    transition_job(session=session, job=job, to=JobStatus.failed, error=error)
    client.set(keys.job_done(job.id), "failed", ex=86400)


def _stop_instances_of_finished_jobs(session: Session, client: redis.Redis, report: ReconcileReport) -> None:
    rows = session.execute(select(GenerationInstance, Job.status).join(Job, Job.id == GenerationInstance.job_id).where(
        GenerationInstance.status.in_(LIVE_INSTANCE_STATUSES), Job.status.in_(TERMINAL_JOB_STATUSES))).all()
    for inst, status in rows:
        inst.status = InstanceStatus.stopping
        client.set(keys.job_done(inst.job_id), str(status), ex=86400)
        report.instances_stopped.append(inst.instance_id)
