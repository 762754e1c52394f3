"""Training-signal checks as job events, so the events log and alert rules see them (`training_signal` alerts,
contract/events.py): `training_signal` (data: check, severity) when a check starts firing on a running job,
`training_signal_cleared` (data: check) when it stops. The newest of the two per (job, check) is the current state,
so a restarted controller never repeats an event. Run by the controller's watch loop (backend/controller/watch.py).
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent
from backend.services.jobs import record_event
from backend.services.signals import jobs_signals
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
    signals = jobs_signals(session=session, jobs=jobs)
    firing = _firing(session, [job.id for job in jobs])
    written = 0
    for job in jobs:
        now = {signal.check: signal for signal in signals[job.id]}
        for check, signal in now.items():
            if (job.id, check) not in firing:
                record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL, message=signal.message,
                             data={"check": check, "severity": signal.severity})
                written += 1
        for job_id, name in firing:
            if job_id == job.id and name not in now:
                record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL_CLEARED,
                             message=f"training signal back: {name.replace('_', ' ')} no longer fires",
                             data={"check": name})
                written += 1
    return written
