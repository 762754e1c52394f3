"""The controller's capacity message on a real Postgres and Redis (the recording sender of test_controller stands for
Celery): slots other jobs' instances were sent for first count as taken, so the message says how many of this job's
instances will really stay pending (#36 finding 14a: "2 slots, 2 free; 1 will stay pending" while 2 did)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from test_controller import RecordingSender, setup  # noqa: F401  (the fixture)

from backend.db import JobEvent
from contract import keys

pytestmark = [pytest.mark.integration]
NODE = "generation-capacity@test"


def _capacity_events(backend: Any, job_id: int) -> list[dict[str, Any]]:
    with backend.session() as session:
        return [{"message": e.message, **(e.data or {})} for e in session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "capacity").order_by(JobEvent.id))]


def test_slots_other_jobs_were_sent_for_first_are_not_counted_free(setup: Any) -> None:  # noqa: F811
    backend, client, submit, reconcile, _ = setup
    for key in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN):  # only this test's worker counts
        client.delete(key)
    client.set(keys.worker_registry(NODE), json.dumps({"node": NODE, "queues": ["generation"], "slots": 2}), ex=300)
    try:
        sender = RecordingSender()
        first = submit(generation={"instances": 2})
        reconcile(sender)
        reconcile(sender)
        assert [job for job, _ in sender.instances].count(first) == 2  # sent, not picked up yet: both slots go to it
        assert _capacity_events(backend, first) == []

        second = submit(generation={"instances": 3})
        reconcile(sender)
        reconcile(sender)
        events = [e for e in _capacity_events(backend, second) if "target" in e]
        assert len(events) == 1, events
        assert events[0]["pending"] == 3 and events[0]["free"] == 0, events
        assert events[0]["message"] == ("target 3 instances exceeds the generation pool: 2 slots, 0 free for it; 3 "
                                        "will stay pending until workers are added"), events
    finally:
        client.delete(keys.worker_registry(NODE))
