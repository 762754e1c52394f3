"""The controller's stall check records `stalled` (with its cause) once when a running job passes its stall limit and
`recovered` when iterations come again; a rule subscribed to `job_stalled` gets a delivery for the first only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import redis
from sqlalchemy import select

from backend.controller.stalls import note_stalls
from backend.db.base import utcnow
from backend.db.enums import JobStatus
from backend.db.models import AlertDelivery, AlertRule, Iteration, Job, JobEvent


def _kinds(backend: Any, job: Job) -> list[tuple[str, str]]:
    with backend.session() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
        return [(row.kind, row.message) for row in rows]


def test_stall_then_recovery_are_events_and_alert_once(pg_backend: Any, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    team = pg_backend.make_team()
    long_ago = utcnow() - timedelta(seconds=900)
    with pg_backend.session() as session:
        job = Job(team_id=team.id, name="stuck", spec={"mode": "colocated"}, status=JobStatus.running,
                  target_instances=0, started_at=long_ago, current_iteration=2)
        session.add(job)
        session.flush()
        for it in (1, 2):
            session.add(Iteration(job_id=job.id, iteration=it, metrics={}, created_at=long_ago + timedelta(seconds=it)))
        rule = AlertRule(team_id=team.id, name="stalls", events=["job_stalled"], channel="webhook",
                         url="http://127.0.0.1:9/x", recipients=[])
        session.add(rule)
    try:
        for _ in range(2):  # said once, not every pass
            with pg_backend.session() as session:
                note_stalls(session, client)
        stalled = [message for kind, message in _kinds(pg_backend, job) if kind == "stalled"]
        assert len(stalled) == 1 and "no iteration for" in stalled[0] and "limit 120 s" in stalled[0]

        with pg_backend.session() as session:
            session.add(Iteration(job_id=job.id, iteration=3, metrics={}))
            session.get(Job, job.id).current_iteration = 3  # type: ignore[union-attr]
        with pg_backend.session() as session:
            note_stalls(session, client)
        kinds = [kind for kind, _ in _kinds(pg_backend, job)]
        assert kinds.count("stalled") == 1 and kinds.count("recovered") == 1
        with pg_backend.session() as session:
            deliveries = list(session.scalars(select(AlertDelivery).where(AlertDelivery.rule_id == rule.id)))
        assert [d.event for d in deliveries] == ["job_stalled"]
    finally:
        with pg_backend.session() as session:
            session.get(Job, job.id).status = JobStatus.cancelled  # type: ignore[union-attr]
            session.delete(session.get(AlertRule, rule.id))
        client.close()
