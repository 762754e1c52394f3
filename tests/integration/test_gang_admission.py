"""Gang admission on a real Postgres and Redis: a `training.devices: N` job is admitted only when N training slots
are free (the registry a training worker keeps in Redis says how many there are), it waits with the reason in its
events and health meanwhile, and no later job takes the slots it waits for. Celery is replaced by the recording
sender of test_controller (the reconcile pass is the real one)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_controller import RecordingSender, setup  # noqa: F401  (the fixture)

from backend.controller.sharing import place_driver
from backend.db import Job, JobEvent, JobStatus
from backend.services.health import jobs_health
from contract import keys
from contract.spec import JobSpec

pytestmark = [pytest.mark.integration]


def _register_training_worker(client: Any, slots: int) -> None:
    for key in client.scan_iter(match=keys.WORKER_REGISTRY_PATTERN):  # only this test's worker counts
        client.delete(key)
    entry = {"node": "training-gang@test", "queues": ["training"], "slots": slots}
    client.set(keys.worker_registry("training-gang@test"), json.dumps(entry), ex=300)


def _status(backend: Any, job_id: int) -> str:
    with backend.session() as session:
        return str(session.get(Job, job_id).status)


def test_a_gang_waits_for_all_its_slots_and_nobody_takes_them(setup: Any) -> None:  # noqa: F811
    backend, client, submit, reconcile, _ = setup
    _register_training_worker(client, slots=2)
    try:
        sender = RecordingSender()
        single = submit(generation={"instances": 1})
        reconcile(sender)
        assert _status(backend, single) == "starting"

        gang = submit(generation={"instances": 1}, training={"devices": 2})
        later = submit(generation={"instances": 1})
        report = reconcile(sender)
        assert gang not in report.admitted and later not in report.admitted  # 1 slot free: neither takes it
        assert (_status(backend, gang), _status(backend, later)) == ("queued", "queued")
        with backend.session() as session:
            events = {job_id: list(session.scalars(JobEvent.__table__.select().with_only_columns(JobEvent.message)
                                                   .where(JobEvent.job_id == job_id, JobEvent.kind == "capacity")))
                      for job_id in (gang, later)}
            health = jobs_health(session=session, jobs=[session.get(Job, gang)])[gang]
        assert events[gang] == ["waiting for training slots: needs 2 (a training.devices: 2 job starts its 2 ranks "
                                "together), 1 of 2 free"], events
        assert events[later] and "held for a job ahead in the queue" in events[later][0], events
        assert health.state == "queued" and health.summary.startswith("waiting for training slots: needs 2")

        with backend.session() as session:
            session.get(Job, single).status = JobStatus.cancelled  # its driver ended: both slots are free
        report = reconcile(sender)
        assert gang in report.admitted and later not in report.admitted  # the gang first, all its slots at once
        assert gang in sender.drivers and _status(backend, later) == "queued"
    finally:
        client.delete(keys.worker_registry("training-gang@test"))


def test_jobs_sharing_training_hold_one_slot_per_shared_process(setup: Any, monkeypatch: Any) -> None:  # noqa: F811
    """`training.share`: drivers are placed on shared training processes of their base model (2 jobs each here),
    each process holds one training slot, a private job waits for a slot of its own, and a placed driver keeps its
    process when it is placed again (a restart)."""
    backend, client, submit, reconcile, _ = setup
    monkeypatch.setenv("STREAMRL_SHARED_TRAINING_JOBS", "2")
    _register_training_worker(client, slots=2)
    sender = RecordingSender()
    shared = {"lora": {"rank": 8}, "share": True}
    try:
        first, second, third = (submit(generation={"instances": 1}, training=shared) for _ in range(3))
        private = submit(generation={"instances": 1})
        report = reconcile(sender)
        assert sorted(report.admitted) == sorted([first, second, third]) and private not in report.admitted
        assert sender.drivers == []  # no private driver task: the three are placed
        train_keys = sorted(k for k in sender.shared if k.startswith("train-"))
        assert [k[-2:] for k in train_keys] == ["-0", "-1"], sender.shared  # one task per process, sent once
        placed = {k: [json.loads(raw)["job_id"] for raw in client.lrange(keys.share_joins(k), 0, -1)]
                  for k in train_keys}
        assert sorted(map(len, placed.values())) == [1, 2] and sorted(sum(placed.values(), [])) == [first, second,
                                                                                                   third]
        with backend.session() as session:
            events = {job_id: list(session.scalars(JobEvent.__table__.select().with_only_columns(JobEvent.message)
                                                   .where(JobEvent.job_id == job_id)))
                      for job_id in (first, private)}
        assert any("to the shared training process train-" in e for e in events[first]), events[first]
        assert any(e.startswith("waiting for training slots: needs 1") for e in events[private]), events[private]
        reconcile(sender)
        assert len([k for k in sender.shared if k.startswith("train-")]) == 2, "a sent process is not sent again"

        with backend.session() as session:  # a restart goes back to the same process
            job = session.get(Job, first)
            again = place_driver(session, client, sender, job, JobSpec.model_validate(job.spec))
        assert again == client.get(keys.driver_share(first)).decode() and first in placed[again]

        with backend.session() as session:  # the lone job of slot 1 ends: its slot is free for the private job
            lone = next(ids[0] for ids in placed.values() if len(ids) == 1)
            session.get(Job, lone).status = JobStatus.cancelled
        report = reconcile(sender)
        assert private in report.admitted and sender.drivers == [private]
    finally:
        client.delete(keys.worker_registry("training-gang@test"))
        for key in sender.shared:
            client.delete(keys.share_joins(key), keys.share_state(key), keys.share_starting(key))


def test_a_shared_training_process_whose_memory_is_full_takes_no_more_drivers(setup: Any) -> None:  # noqa: F811
    """The process's heartbeat reports its memory room (workers/runtime/shared_training.py `MemoryRoom`): with none
    left, the next sharing job on that base model is placed on a new process, which takes a slot of its own."""
    backend, client, submit, reconcile, _ = setup
    _register_training_worker(client, slots=2)
    sender = RecordingSender()
    shared = {"lora": {"rank": 8}, "share": True}
    try:
        first = submit(generation={"instances": 1}, training=shared)
        reconcile(sender)
        full = client.get(keys.driver_share(first)).decode()
        client.set(keys.share_state(full), json.dumps({"members": [first], "room": 0}), ex=60)
        second = submit(generation={"instances": 1}, training=shared)
        private = submit(generation={"instances": 1})
        report = reconcile(sender)
        assert second in report.admitted and private not in report.admitted  # the new process took the last slot
        placed = client.get(keys.driver_share(second)).decode()
        assert placed != full and placed.endswith("-1") and placed in sender.shared, (placed, full)
    finally:
        client.delete(keys.worker_registry("training-gang@test"))
        for key in sender.shared:
            client.delete(keys.share_joins(key), keys.share_state(key), keys.share_starting(key))
