"""The reconcile loop: drive the running world towards the desired state kept in the database.

One pass (`reconcile_once`):
1. one scheduling pass (backend/services/admission.py): admit queued jobs by priority and fair share within their
   team's quotas, flag preemptions, and send each admitted job's driver task (`training.run_job`); a preempted job
   whose driver handed it back returns to `queued`;
2. fail jobs whose driver never started or stopped heart-beating, with an error that says what to do;
3. per active job: mark silent instances dead, run the autoscaler for `auto` jobs, start instances up to the
   target and stop the surplus (a stop flag the instance checks between requests);
4. paused and finished jobs: stop their instances;
5. deployments keep min_replicas replicas (backend/services/deployments.py) and queued evaluations get the
   generation slots that freed up (backend/services/evaluations.py), both through generation leases.
Tinker training sessions (jobs tagged `tinker`, backend/services/tinker.py) are admitted the same way, get
`training.tinker_session` instead of a driver, no instances, and fail (never restart) when their worker dies.
Every decision that changes a job is a JobEvent. Instances are numbered `gen-<k>`, never reused within a job.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import redis
from pydantic import ValidationError
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from backend.controller import sharing
from backend.controller.budgets import enforce_budgets
from backend.controller.capacity import PoolCapacity, generation_capacity, queued_ahead, training_slots
from backend.controller.preemption import requeue_preempted
from backend.controller.scaling import desired_instances
from backend.db import GenerationInstance, InstanceStatus, Job, JobStatus
from backend.db.enums import LIVE_INSTANCE_STATUSES, TERMINAL_JOB_STATUSES
from backend.db.session import session_scope
from backend.services import deployments, evaluations, tinker_parking
from backend.services.admission import schedule_pass
from backend.services.jobs import (
    job_devices,
    record_event,
    shared_training_jobs,
    transition_job,
)
from backend.services.tinker import is_tinker_job
from contract import keys, liveness, tasks
from contract.liveness import Timeouts
from contract.redis_client import connect
from contract.reward_window import clear_tally, error_rate_exceeded, reward_window
from contract.settings import get_settings
from contract.spec import JobSpec
from contract.tasks import make_celery, platform_redis_url

PENDING_REPORT_S = 30.0  # an instance not picked up by a worker for this long is reported as pending


class TaskSender(Protocol):
    def start_driver(self, job_id: int) -> None: ...

    def start_instance(self, job_id: int, instance_id: str) -> str: ...

    def start_tinker_session(self, job_id: int) -> None: ...

    def start_shared(self, key: str) -> str: ...

    def start_shared_training(self, key: str) -> str: ...


class CeleryTaskSender:
    """Sends the runtime's tasks by name, so the control plane never imports the (torch) worker code."""

    def __init__(self, redis_url: str | None = None) -> None:
        self.app = make_celery(redis_url)

    def start_driver(self, job_id: int) -> None:
        self.app.send_task(tasks.RUN_JOB, args=[job_id])

    def start_instance(self, job_id: int, instance_id: str) -> str:
        return str(self.app.send_task(tasks.RUN_INSTANCE, args=[job_id, instance_id]).id)

    def start_tinker_session(self, job_id: int) -> None:
        self.app.send_task(tasks.TINKER_SESSION, args=[job_id])

    def start_shared(self, key: str) -> str:
        return str(self.app.send_task(tasks.RUN_SHARED, args=[key]).id)

    def start_shared_training(self, key: str) -> str:
        return str(self.app.send_task(tasks.RUN_SHARED_TRAINING, args=[key]).id)


@dataclass
class ReconcileReport:
    admitted: list[int] = field(default_factory=list)
    drivers_started: list[int] = field(default_factory=list)
    instances_started: list[str] = field(default_factory=list)
    instances_stopped: list[str] = field(default_factory=list)
    instances_dead: list[str] = field(default_factory=list)
    jobs_failed: list[int] = field(default_factory=list)
    jobs_pending: int = 0  # jobs still queued, starting, running or paused after the pass (not a change)
    deployment_replicas: list[str] = field(default_factory=list)  # replicas asked for to keep min_replicas
    evaluations_sent: list[int] = field(default_factory=list)  # queued evaluations given a generation slot

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
    client = client or connect(platform_redis_url())
    timeouts = timeouts or Timeouts.from_env()
    report = ReconcileReport()
    with session_scope(engine) as session:
        def waiting(job: Job, reason: str) -> None:  # one event per job and reason
            if client.set(keys.noted(job.id, f"gang:{reason}"), 1, nx=True, ex=86400):
                pool = "generation_slots" if reason.startswith("waiting for generation") else "training_slots"
                record_event(session=session, job_id=job.id, kind="capacity", message=reason,
                             data={"devices": job_devices(job), "waiting": pool})

        pool = generation_capacity(session, client, timeouts.instance_heartbeat_s)
        scheduled = schedule_pass(session=session, client=client, training=training_slots(session, client),
                                  generation=(pool.free, pool.slots) if pool is not None else None, waiting=waiting)
        for job in scheduled.admitted:
            report.admitted.append(job.id)
            # a resumed job starts clean: no leftover end marker or driver bookkeeping from its previous run
            client.delete(keys.job_done(job.id), keys.driver_sent(job.id), keys.driver_lost_at(job.id),
                          keys.driver_handback(job.id), keys.driver_seen(job.id), keys.driver_share(job.id),
                          keys.job_preempt(job.id))
            clear_tally(client, job.id)  # a resumed job is judged on its new rewards only
    with session_scope(engine) as session:
        enforce_budgets(session, client)  # pause the jobs over a budget, resume those it paused that have room
        jobs = session.scalars(select(Job).where(Job.status.in_([JobStatus.starting, JobStatus.running,
                                                                   JobStatus.paused]))).all()
        capacity = generation_capacity(session, client, timeouts.instance_heartbeat_s)
        for job in jobs:
            _reconcile_job(session, job, sender, client, timeouts, report, capacity)
        _stop_instances_of_finished_jobs(session, client, report)
        report.deployment_replicas = deployments.reconcile(session, client)  # min_replicas kept running
        report.evaluations_sent = evaluations.dispatch_waiting(session, client)  # queued ones on freed slots
        tinker_parking.end_abandoned(session, client, get_settings().artifacts)
        report.jobs_pending = session.scalar(select(func.count()).select_from(Job).where(
            Job.status.in_([JobStatus.queued, JobStatus.starting, JobStatus.running, JobStatus.paused]))) or 0
    return report


def _reconcile_job(session: Session, job: Job, sender: TaskSender, client: redis.Redis, timeouts: Timeouts,
                   report: ReconcileReport, capacity: PoolCapacity | None = None) -> None:
    if job.status == JobStatus.paused:
        _scale_to(session, job, [], 0, sender, client, report)
        return
    if is_tinker_job(job):
        return _reconcile_tinker(session, job, sender, client, timeouts, report)
    try:
        spec = JobSpec.model_validate(job.spec)
    except ValidationError as err:  # stored by an older version, or written around the API: it cannot run
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, f"the job's stored spec is not valid any more: {err}")
    if job.status == JobStatus.starting and liveness.mark_driver_sent(client, job.id):
        where = _send_driver(session, job, spec, client, sender)
        report.drivers_started.append(job.id)
        record_event(session=session, job_id=job.id, kind="worker", message=f"training driver task sent{where}",
                     data={"driver": "sent"})
    if _driver_lost(client, job, timeouts):
        return recover_driver(session, job, spec, client, sender, timeouts, report)
    placed = sharing.placed_key(client, job.id) if spec.shares_training else None
    if placed is not None and not client.exists(keys.driver_seen(job.id)):  # placed, not picked up yet
        sharing.ensure_shared(client, sender, placed)
    # a stopping instance finishes its admitted requests and exits (status stopped); one that goes silent meanwhile
    # is dead, so the driver re-dispatches what its stream still holds
    instances = list(session.scalars(select(GenerationInstance).where(
        GenerationInstance.job_id == job.id,
        GenerationInstance.status.in_([*LIVE_INSTANCE_STATUSES, InstanceStatus.stopping]))))
    waiting_for_slot = capacity is not None and capacity.free == 0
    silent = [inst for inst in instances if _silent(inst, timeouts, report, waiting_for_slot)]
    live = [inst for inst in instances if inst not in silent and inst.status in LIVE_INSTANCE_STATUSES]
    _report_pending(session, job, live, client, capacity)
    for inst in live:  # placed on a shared instance and not picked up yet: its process must exist
        task = inst.celery_task_id or ""
        if inst.heartbeat_at is None and task.startswith(sharing.TASK_PREFIX):
            sharing.ensure_shared(client, sender, task.removeprefix(sharing.TASK_PREFIX))
    for inst in instances:
        if inst in silent:
            inst.status, inst.stopped_at = InstanceStatus.dead, _now()
            client.set(keys.instance_stop(job.id, inst.instance_id), 1, ex=86400)
            record_event(session=session, job_id=job.id, kind="worker",
                         message=f"instance {inst.instance_id} stopped heart-beating; replacing it",
                         data={"instance_id": inst.instance_id})
    crash = crash_loop_error(session, job.id, spec.failover.instance_crash_loop)
    if crash is not None:
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, f"generation instances keep failing ({spec.failover.instance_crash_loop} "
                     f"in a row): {crash}")
    reward_error = _reward_error(client, job, spec)
    if reward_error is not None:
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, reward_error)
    target = 0 if spec.mode == "colocated" else desired_instances(session, job, spec, live)
    if not spec.shares_generation:  # a shared instance holds one slot for many jobs' instances
        _note_capacity(session, job, live, target, client, capacity)
    _scale_to(session, job, live, target, sender, client, report, spec)


def _reward_error(client: redis.Redis, job: Job, spec: JobSpec) -> str | None:
    """The error when the job's rewards failed at `failover.reward_error_rate` or more over the window."""
    if job.status != JobStatus.running:
        return None
    window, rate = spec.failover.reward_error_window_s, spec.failover.reward_error_rate
    calls, errors, last = reward_window(client, job.id, window)
    if not error_rate_exceeded(calls, errors, rate):
        return None
    return (f"reward errors: {errors} of {calls} rewards in the last {window:.0f}s failed (failover.reward_error_rate "
            f"{rate:g}); newest: {last}")


def crash_loop_error(session: Session, job_id: int, limit: int) -> str | None:
    """The error when the job's last `limit` instances all failed with the same error (replacing them is futile)."""
    errors = list(session.scalars(select(GenerationInstance.error).where(GenerationInstance.job_id == job_id)
                                  .order_by(GenerationInstance.id.desc()).limit(limit)))
    if len(errors) == limit and errors[0] is not None and all(e == errors[0] for e in errors):
        return errors[0]
    return None


def _report_pending(session: Session, job: Job, live: list[GenerationInstance], client: redis.Redis,
                    capacity: PoolCapacity | None) -> None:
    """One event per instance still waiting for a worker slot after PENDING_REPORT_S."""
    for inst in live:
        waited = (_now() - _aware(inst.started_at)).total_seconds()
        if inst.heartbeat_at is None and waited > PENDING_REPORT_S and \
                client.set(keys.noted(job.id, f"pending:{inst.instance_id}"), 1, nx=True, ex=86400):
            slots = f" ({capacity.slots} generation slots, {capacity.in_use} in use)" if capacity else ""
            record_event(session=session, job_id=job.id, kind="capacity",
                         message=f"instance {inst.instance_id} is pending: no generation worker picked it up in "
                                 f"{waited:.0f}s{slots}", data={"instance_id": inst.instance_id, "pending": True})


def _note_capacity(session: Session, job: Job, live: list[GenerationInstance], target: int, client: redis.Redis,
                   capacity: PoolCapacity | None) -> None:
    """Say once per target when it exceeds what the generation pool can run now."""
    if capacity is None:
        return
    holding = sum(1 for inst in live if inst.heartbeat_at is not None)
    ours = [inst.started_at for inst in live if inst.heartbeat_at is None]
    free = max(0, capacity.free - queued_ahead(session, job.id, min(ours) if ours else _now()))
    short = target - holding - free
    if short > 0 and client.set(keys.noted(job.id, f"capacity:{target}"), 1, nx=True, ex=86400):
        record_event(session=session, job_id=job.id, kind="capacity",
                     message=f"target {target} instances exceeds the generation pool: {capacity.slots} slots, "
                             f"{free} free for it; {short} will stay pending until workers are added",
                     data={"target": target, "slots": capacity.slots, "free": free, "pending": short})


def _silent(inst: GenerationInstance, timeouts: Timeouts, report: ReconcileReport, waiting_for_slot: bool) -> bool:
    """A running instance that stopped heart-beating, or one never picked up although a worker slot was free."""
    now = _now()
    if inst.heartbeat_at is None:
        silent = not waiting_for_slot and now - _aware(inst.started_at) > timedelta(seconds=timeouts.instance_start_s)
    else:
        silent = now - _aware(inst.heartbeat_at) > timedelta(seconds=timeouts.instance_heartbeat_s)
    if silent:
        report.instances_dead.append(inst.instance_id)
    return silent


def _scale_to(session: Session, job: Job, live: list[GenerationInstance], target: int, sender: TaskSender,
              client: redis.Redis, report: ReconcileReport, spec: JobSpec | None = None) -> None:
    live = sorted(live, key=lambda inst: inst.id)
    for inst in live[target:]:  # the newest go first
        inst.status = InstanceStatus.stopping
        client.set(keys.instance_stop(job.id, inst.instance_id), 1, ex=86400)
        report.instances_stopped.append(inst.instance_id)
        record_event(session=session, job_id=job.id, kind="scale", message=f"stopping instance {inst.instance_id}",
                     data={"instance_id": inst.instance_id, "target": target})
    for slot in range(len(live), target):
        instance_id = _next_instance_id(session, job.id)
        inst = GenerationInstance(job_id=job.id, instance_id=instance_id, status=InstanceStatus.starting)
        session.add(inst)
        session.commit()  # the row must be visible before the task can run, or the task finds no row and exits
        report.instances_started.append(instance_id)
        if spec is not None and spec.shares_generation:
            key = sharing.place_instance(session, client, sender, job, spec, instance_id, slot)
            inst.celery_task_id = f"{sharing.TASK_PREFIX}{key}"
            record_event(session=session, job_id=job.id, kind="scale",
                         message=f"starting instance {instance_id} on a shared generation instance: LoRA jobs on the "
                                 f"same base model share one copy of it and one batch (generation.share: false "
                                 f"gives the job its own)",
                         data={"instance_id": instance_id, "target": target, "shared": key})
            continue
        inst.celery_task_id = sender.start_instance(job.id, instance_id)
        record_event(session=session, job_id=job.id, kind="scale", message=f"starting instance {instance_id}",
                     data={"instance_id": instance_id, "target": target})


def _next_instance_id(session: Session, job_id: int) -> str:
    names = session.scalars(select(GenerationInstance.instance_id).where(GenerationInstance.job_id == job_id)).all()
    used = [int(n.split("-")[1]) for n in names if n.startswith("gen-") and n.split("-")[1].isdigit()]
    return f"gen-{max(used, default=-1) + 1}"


def _reconcile_tinker(session: Session, job: Job, sender: TaskSender, client: redis.Redis, timeouts: Timeouts,
                      report: ReconcileReport) -> None:
    """A Tinker session: send its task once; when its worker is gone it is parked at its last automatic park and
    restored (tinker_parking.worker_lost), or fails when it never started or was lost too often (its pending futures
    then fail with a retryable error and the SDK resumes from its last save_state in a new training client)."""
    if job.status == JobStatus.starting and liveness.mark_driver_sent(client, job.id):
        sender.start_tinker_session(job.id)
        report.drivers_started.append(job.id)
        record_event(session=session, job_id=job.id, kind="worker", message="tinker session task sent",
                     data={"driver": "sent"})
    if _driver_lost(client, job, timeouts):
        picked_up = job.status == JobStatus.running or client.exists(keys.driver_seen(job.id))
        error = tinker_parking.worker_lost(session, client, job) if picked_up else (
            f"no training worker picked the session up within {timeouts.driver_start_s:.0f}s; start one with "
            "`streamrl worker --pool training`")
        if error is not None:
            report.jobs_failed.append(job.id)
            _fail(session, job, client, error)


def _driver_lost(client: redis.Redis, job: Job, timeouts: Timeouts) -> bool:
    """The driver beat since it was sent and its heartbeat expired, or it was never picked up in time."""
    if liveness.driver_alive(client, job.id):
        client.set(keys.driver_seen(job.id), 1, ex=86400)
        client.delete(keys.driver_unknown_since(job.id))
        return False
    if client.exists(keys.driver_seen(job.id)):
        return True
    sent = liveness.driver_sent_at(client, job.id)
    if sent is None and job.status == JobStatus.running:
        # Redis lost every trace of the driver (a restart without persistence): a live driver beats again within
        # seconds; if none does, it is gone
        client.set(keys.driver_unknown_since(job.id), time.time(), nx=True, ex=86400)
        since = float(client.get(keys.driver_unknown_since(job.id)) or time.time())
        return time.time() - since > 2 * timeouts.driver_heartbeat_ttl_s
    return sent is not None and time.time() - sent > timeouts.driver_start_s


def recover_driver(session: Session, job: Job, spec: JobSpec, client: redis.Redis, sender: TaskSender,
                   timeouts: Timeouts, report: ReconcileReport) -> None:
    """The driver is gone. A job that never started fails (no training worker); a running one is restarted from its
    newest checkpoint in a new epoch: at once after a clean hand-back, else after backoff_s * 2**(failures) and at
    most `failover.max_restarts` times, each restart a JobEvent."""
    if job.status != JobStatus.running:  # the first driver task was never picked up
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, f"no training worker picked this job up within "
                     f"{timeouts.driver_start_s:.0f}s; start one with `streamrl worker --pool training`")
    handed_back = client.get(keys.driver_handback(job.id)) is not None
    if handed_back and requeue_preempted(session, job, client):  # the scheduler's preemption: back in the queue
        return
    if not handed_back and job.driver_failures >= spec.failover.max_restarts:
        report.jobs_failed.append(job.id)
        return _fail(session, job, client, f"the training driver died {job.driver_failures + 1} times (no heartbeat "
                     f"for {timeouts.driver_heartbeat_ttl_s:.0f}s; restarts allowed: {spec.failover.max_restarts}); "
                     "`resume` continues from the newest checkpoint")
    delay = 0.0 if handed_back else spec.failover.backoff_s * 2 ** job.driver_failures
    if client.set(keys.driver_lost_at(job.id), time.time(), nx=True, ex=86400):
        cause = "handed the job back" if handed_back else \
            f"stopped heart-beating ({timeouts.driver_heartbeat_ttl_s:.0f}s)"
        record_event(session=session, job_id=job.id, kind="worker", message=f"training driver {cause}; restarting it "
                     f"from the newest checkpoint in {delay:.0f}s",
                     data={"driver": "lost", "failures": job.driver_failures, "handed_back": handed_back,
                           "delay_s": delay})
    lost_at = float(client.get(keys.driver_lost_at(job.id)) or time.time())
    if time.time() - lost_at < delay:
        return
    job.driver_epoch += 1
    job.driver_failures += 0 if handed_back else 1
    client.delete(keys.driver_lost_at(job.id), keys.driver_handback(job.id), keys.driver_sent(job.id),
                  keys.driver_seen(job.id), keys.driver_unknown_since(job.id))
    session.commit()  # the new epoch is visible before the task that reads it can run
    liveness.mark_driver_sent(client, job.id)
    _send_driver(session, job, spec, client, sender)
    report.drivers_started.append(job.id)
    record_event(session=session, job_id=job.id, kind="worker",
                 message=f"training driver restarted (epoch {job.driver_epoch}; unplanned restarts "
                         f"{job.driver_failures} of {spec.failover.max_restarts})",
                 data={"driver": "restarted", "epoch": job.driver_epoch, "failures": job.driver_failures})


def _send_driver(session: Session, job: Job, spec: JobSpec, client: redis.Redis, sender: TaskSender) -> str:
    """Send the job's driver task, or place it on a shared training process (`training.share`); returns what the
    job's event adds about where."""
    if not spec.shares_training:
        sender.start_driver(job.id)
        return ""
    key = sharing.place_driver(session, client, sender, job, spec)
    return (f" to the shared training process {key} of its base model (one copy of the base model for up to "
            f"{shared_training_jobs()} LoRA jobs' adapters)")


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
