"""The controller's capacity message on a real Postgres and Redis (the recording sender of test_controller stands for
Celery): slots other jobs' instances were sent for first count as taken, so the message says how many of this job's
instances will really stay pending (#36 finding 14a: "2 slots, 2 free; 1 will stay pending" while 2 did)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from test_controller import RecordingSender, setup  # noqa: F401  (the fixture)

from backend.db import Job, JobEvent, Team
from backend.services.jobs import scale_job
from contract import keys

pytestmark = [pytest.mark.integration]
NODE = "generation-capacity@test"


def _capacity_events(backend: Any, job_id: int) -> list[dict[str, Any]]:
    with backend.session() as session:
        return [{"message": e.message, **(e.data or {})} for e in session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "capacity").order_by(JobEvent.id))]


def test_slots_other_jobs_were_sent_for_first_are_not_counted_free(setup: Any) -> None:  # noqa: F811
    backend, client, submit, reconcile, team = setup
    for key in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN):  # only this test's worker counts
        client.delete(key)
    client.set(keys.worker_registry(NODE), json.dumps({"node": NODE, "queues": ["generation"], "slots": 3}), ex=300)
    try:
        sender = RecordingSender()
        first = submit(generation={"instances": 1})
        reconcile(sender)
        reconcile(sender)
        second = submit(generation={"instances": 1})
        reconcile(sender)
        reconcile(sender)
        sent = [job for job, _ in sender.instances]
        assert (sent.count(first), sent.count(second)) == (1, 1), sent  # sent, neither picked up yet
        with backend.session() as session:  # the second job asks for 4: the first one's instance takes a slot first
            scale_job(session=session, team=session.get(Team, team.id), job=session.get(Job, second),
                      target_instances=4, autoscale=False)
        reconcile(sender)
        events = [e for e in _capacity_events(backend, second) if e.get("target") == 4]
        assert len(events) == 1, _capacity_events(backend, second)
        assert events[0]["pending"] == 2 and events[0]["free"] == 2, events
        assert events[0]["message"] == ("target 4 instances exceeds the generation pool: 3 slots, 2 free for it; 2 "
                                        "will stay pending until workers are added"), events
    finally:
        client.delete(keys.worker_registry(NODE))
