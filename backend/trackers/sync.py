"""Mirror recorded iterations to each job's trackers; called by the controller's watch loop every few seconds.

Per unfinished `TrackerRun`: open (or resume) the run, send the iteration rows after `sent_iteration` and advance it,
and once the job is over and every row is in, close the run (MLflow: with the final checkpoint). A tracker that
fails is marked down with a `tracker` job event and retried after a backoff; its rows wait in the database, so the
job itself never waits or fails for it. Recovery sends the backlog and says so in one more event. Delivery is
at-least-once: rows sent just before a crash may be sent again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from backend.db.base import utcnow
from backend.db.enums import TERMINAL_JOB_STATUSES
from backend.db.models import Checkpoint, Iteration, Job, Team, TrackerRun
from backend.db.session import session_scope
from backend.services.egress import EgressRefused, GuardedTransport, check_url, policy_of
from backend.services.jobs import record_event
from backend.services.trackers import connection
from backend.trackers.base import JobInfo, Row, TrackerDown, TrackerSink, TrackerUnavailable, scalar_metrics
from backend.trackers.mlflow_rest import MlflowSink
from backend.trackers.tensorboard_files import TensorBoardSink
from backend.trackers.wandb_sink import WandbSink
from contract import events
from contract.settings import Settings
from contract.spec_operations import TrackerSpec

log = logging.getLogger("streamrl.trackers")
BATCH_ROWS = 200
RETRY_S = (5.0, 10.0, 30.0, 60.0)  # waits after the 1st, 2nd, 3rd, later failures in a row


@dataclass
class OpenSinks:
    """The sinks this process has open, by TrackerRun id (a restarted process resumes runs by their run_ref)."""

    sinks: dict[int, TrackerSink] = field(default_factory=dict)
    failures: dict[int, int] = field(default_factory=dict)

    def close_all(self) -> None:
        for sink in self.sinks.values():
            sink.close()
        self.sinks.clear()


def make_sink(tracker: TrackerSpec, job: JobInfo, conn: dict[str, str], settings: Settings) -> TrackerSink:
    """The run's sink; tracker servers are reached under the egress policy (MLflow: every connection checked; W&B's
    SDK connects itself, so its server is checked just before)."""
    run_name = tracker.run_name or job.name
    if tracker.type == "mlflow":
        if not conn.get("tracking_uri"):
            raise TrackerDown("the team's MLflow connection was removed (PUT /trackers/mlflow)")
        _egress_check(conn["tracking_uri"], settings, resolve_now=False)
        return MlflowSink(job, conn["tracking_uri"], tracker.experiment or "streamrl", run_name,
                          token=conn.get("token"), username=conn.get("username"), password=conn.get("password"),
                          timeout_s=settings.alert_timeout_s, transport=GuardedTransport(policy_of(settings)))
    if tracker.type == "wandb":
        if conn.get("base_url"):
            _egress_check(conn["base_url"], settings, resolve_now=True)
        return WandbSink(job, tracker.project or "streamrl", run_name, tracker.mode or "online",
                         entity=conn.get("entity"), api_key=conn.get("api_key"), base_url=conn.get("base_url"))
    return TensorBoardSink(job)


def _egress_check(url: str, settings: Settings, *, resolve_now: bool) -> None:
    try:
        check_url(url, settings, resolve_now=resolve_now)
    except EgressRefused as exc:
        raise TrackerDown(f"refused by the egress policy: {exc}") from None


def sync_trackers(settings: Settings, sinks: OpenSinks, engine: Engine | None = None) -> int:
    """One pass over every unfinished tracker run; the number of iteration rows sent."""
    with session_scope(engine) as session:
        now = utcnow()
        run_ids = list(session.scalars(select(TrackerRun.id).where(
            TrackerRun.finished.is_(False), (TrackerRun.retry_at.is_(None)) | (TrackerRun.retry_at <= now))))
    return sum(_sync_one(run_id, settings, sinks, engine) for run_id in run_ids)


def _sync_one(run_id: int, settings: Settings, sinks: OpenSinks, engine: Engine | None) -> int:
    with session_scope(engine) as session:
        run = session.get(TrackerRun, run_id)
        job = session.get(Job, run.job_id) if run else None
        if run is None or job is None:
            return 0
        trackers: dict[str, TrackerSpec] = {t.type: t for t in (TrackerSpec.model_validate(x) for x in
                                        job.spec.get("telemetry", {}).get("trackers", []))}
        tracker = trackers.get(run.tracker)
        if tracker is None:
            run.finished = True
            return 0
        team = session.get(Team, job.team_id)
        info = JobInfo(job.id, job.name, job.spec, team.name if team else "", settings.artifacts / "jobs" / str(job.id))
        try:
            return _advance(session, run, job, tracker, info, settings, sinks)
        except TrackerUnavailable as exc:
            run.finished, run.last_error = True, str(exc)
            record_event(session=session, job_id=job.id, kind=events.TRACKER,
                         message=f"{run.tracker} tracker off: {exc}", data={"tracker": run.tracker})
        except TrackerDown as exc:
            _went_down(session, run, str(exc), sinks)
        return 0


def _advance(session: Session, run: TrackerRun, job: Job, tracker: TrackerSpec, info: JobInfo, settings: Settings,
             sinks: OpenSinks) -> int:
    sink = sinks.sinks.get(run.id)
    if sink is None:
        conn = connection(session, job.team_id, tracker.type, settings.secret_key) if tracker.type != "tensorboard" \
            else {}
        sink = make_sink(tracker, info, conn, settings)
        run.run_ref = sink.start(run.run_ref)
        sinks.sinks[run.id] = sink
        session.commit()  # the run id is kept before any row is sent: a restart resumes this run
    rows = session.execute(select(Iteration.iteration, Iteration.metrics, Iteration.created_at).where(
        Iteration.job_id == job.id, Iteration.iteration > run.sent_iteration)
        .order_by(Iteration.iteration).limit(BATCH_ROWS)).all()
    if rows:
        sink.log_rows([Row(it, scalar_metrics(metrics), at) for it, metrics, at in rows])
        run.sent_iteration = rows[-1][0]
    if run.down_since is not None:
        record_event(session=session, job_id=job.id, kind=events.TRACKER,
                     message=f"{run.tracker} is reachable again: buffered iterations are being sent "
                             f"(up to {run.sent_iteration} now)", data={"tracker": run.tracker, "down": False})
        run.down_since, run.retry_at, run.last_error = None, None, None
    sinks.failures.pop(run.id, None)
    if job.status in TERMINAL_JOB_STATUSES and len(rows) < BATCH_ROWS:
        sink.finish(str(job.status), _final_checkpoint(session, job, settings))
        sink.close()
        sinks.sinks.pop(run.id, None)
        run.finished = True
    return len(rows)


def _final_checkpoint(session: Session, job: Job, settings: Settings) -> Path | None:
    path = session.scalar(select(Checkpoint.path).where(Checkpoint.job_id == job.id)
                          .order_by(Checkpoint.iteration.desc()).limit(1))
    if path is None:
        return None
    resolved = Path(path) if Path(path).is_absolute() else settings.artifacts / path
    return resolved if resolved.is_dir() else None


def _went_down(session: Session, run: TrackerRun, error: str, sinks: OpenSinks) -> None:
    failures = sinks.failures.get(run.id, 0) + 1
    sinks.failures[run.id] = failures
    sink = sinks.sinks.pop(run.id, None)  # reopened (resumed) on the next attempt
    if sink is not None:
        sink.close()
    run.last_error = error[:1000]
    run.retry_at = utcnow() + timedelta(seconds=RETRY_S[min(failures, len(RETRY_S)) - 1])
    if run.down_since is None:
        run.down_since = utcnow()
        record_event(session=session, job_id=run.job_id, kind=events.TRACKER,
                     message=f"{run.tracker} is unreachable ({error[:300]}); the job goes on, its metrics are "
                             f"buffered and sent when the tracker is back (sent so far: iteration "
                             f"{run.sent_iteration})", data={"tracker": run.tracker, "down": True})
    log.warning("tracker %s of job %s down: %s", run.tracker, run.job_id, error)
