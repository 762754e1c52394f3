"""Training-signal checks as job events, so the events log and alert rules see them (`training_signal` alerts,
contract/events.py): `training_signal` (data: check, severity) when a check starts firing on a running job,
`training_signal_cleared` (data: check) when it stops. The newest of the two per (job, check) is the current state,
so a restarted controller never repeats an event. Run by the controller's watch loop (backend/controller/watch.py).

Hysteresis (backend/services/signals.py): a check fires once its condition held on the newest 3 iterations and clears
only after CLEAR_AFTER consecutive iterations without it, one event per transition: a series that keeps crossing the
line (truncated, truncated, truncated, not, truncated...) fires once and stays fired instead of flapping, which would
fire the job's `training_signal` alert rules at every crossing.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent
from backend.services.jobs import record_event
from backend.services.signals import check_history, cleared, jobs_histories
from contract import events

KINDS = (events.TRAINING_SIGNAL, events.TRAINING_SIGNAL_CLEARED)


def _firing(session: Session, job_ids: list[int]) -> set[tuple[int, str]]:
    """(job, check) pairs whose newest signal event says the check fires."""
    check = JobEvent.data["check"].as_string()
    newest = (select(func.max(JobEvent.id)).where(JobEvent.job_id.in_(job_ids), JobEvent.kind.in_(KINDS))
              .group_by(JobEvent.job_id, check))
    rows = session.scalars(select(JobEvent).where(JobEvent.id.in_(newest)))
    return {(e.job_id, str((e.data or {}).get("check"))) for e in rows if e.kind == events.TRAINING_SIGNAL}


def note_signals(session: Session) -> int:
    """One pass over the running jobs; the number of events written."""
    jobs = list(session.scalars(select(Job).where(Job.status == JobStatus.running)))
    if not jobs:
        return 0
    histories = jobs_histories(session=session, jobs=jobs)
    firing = _firing(session, [job.id for job in jobs])
    written = 0
    for job in jobs:
        history, spec = histories[job.id], job.spec or {}
        now = {signal.check: signal for signal in check_history(history, spec)}
        for check, signal in now.items():
            if (job.id, check) not in firing:
                record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL, message=signal.message,
                             data={"check": check, "severity": signal.severity})
                written += 1
        for job_id, name in firing:
            if job_id == job.id and name not in now and cleared(history, name, spec):
                record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL_CLEARED,
                             message=f"training signal back: {name.replace('_', ' ')} no longer fires",
                             data={"check": name})
                written += 1
    return written
