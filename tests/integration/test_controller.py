"""The reconcile loop on a real Postgres and Redis: admission, instance targets, dead instances, lost drivers, and
the autoscaler's decisions as JobEvents. Celery is replaced by a recording `TaskSender` here (the same loop runs
against real Celery workers in test_runtime_modes / test_runtime_faults)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from sqlalchemy import select

from backend.controller.reconcile import reconcile_once
from backend.db import GenerationInstance, Iteration, Job, JobEvent, JobStatus, Model, Team, User
from backend.services.jobs import cancel_job, create_job, scale_job
from contract import keys
from contract.liveness import Timeouts, beat_driver
from contract.spec import JobSpec
from workers.stream import clear_job

pytestmark = [pytest.mark.integration]
FAST = Timeouts(instance_heartbeat_s=5.0, instance_start_s=5.0, driver_start_s=5.0, driver_heartbeat_ttl_s=5.0)


@dataclass
class RecordingSender:
    drivers: list[int] = field(default_factory=list)
    instances: list[tuple[int, str]] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)

    def start_driver(self, job_id: int) -> None:
        self.drivers.append(job_id)

    def start_instance(self, job_id: int, instance_id: str) -> str:
        self.instances.append((job_id, instance_id))
        return f"task-{instance_id}"

    def start_tinker_session(self, job_id: int) -> None:
        self.drivers.append(job_id)

    def start_shared(self, key: str) -> str:
        self.shared.append(key)
        return f"task-{key}"

    def start_shared_training(self, key: str) -> str:
        self.shared.append(key)
        return f"task-{key}"


@pytest.fixture
def setup(pg_backend: Any, redis_url: str, tmp_path: Any) -> Any:
    with pg_backend.session() as session:  # jobs earlier modules left unfinished (the database is the session's) are
        for job in session.scalars(select(Job).where(Job.status.not_in(["succeeded", "failed", "cancelled"]))):
            job.status = JobStatus.cancelled  # not ours: the pass under test must not admit them
    team = pg_backend.make_team(max_concurrent_jobs=4, max_generation_instances=8)
    user = pg_backend.make_user(team)
    with pg_backend.session() as session:
        session.add(Model(team_id=team.id, name="m", path=str(tmp_path), created_by_id=user.id))
    client = redis.Redis.from_url(redis_url)
    created: list[int] = []

    def submit(**overrides: Any) -> int:
        spec = JobSpec.model_validate({"model": "m", "dataset": {"builtin": "arithmetic"}, **overrides})
        with pg_backend.session() as session:
            job = create_job(session=session, team=session.get(Team, team.id), user=session.get(User, user.id),
                             spec=spec)
            created.append(job.id)
            return int(job.id)

    def reconcile(sender: RecordingSender) -> Any:
        return reconcile_once(sender=sender, client=client, timeouts=FAST, engine=pg_backend.engine)

    yield pg_backend, client, submit, reconcile, team
    with pg_backend.session() as session:  # the database is shared with later modules' real controllers: leave
        for job_id in created:               # nothing for them to run (these jobs' models are not real)
            job = session.get(Job, job_id)
            if job.status not in ("succeeded", "failed", "cancelled"):
                job.status = JobStatus.cancelled
    for job_id in created:
        clear_job(client, job_id)
    client.close()


def _instances(backend: Any, job_id: int) -> dict[str, str]:
    with backend.session() as session:
        rows = session.scalars(select(GenerationInstance).where(GenerationInstance.job_id == job_id))
        return {r.instance_id: str(r.status) for r in rows}


def test_admits_starts_driver_and_instances_then_follows_target(setup: Any) -> None:
    backend, client, submit, reconcile, team = setup
    job_id = submit(generation={"instances": 2})
    sender = RecordingSender()
    report = reconcile(sender)
    assert job_id in report.admitted and sender.drivers == [job_id]
    assert sorted(i for j, i in sender.instances if j == job_id) == ["gen-0", "gen-1"]
    reconcile(sender)
    assert sender.drivers == [job_id], "the driver task is sent once"
    with backend.session() as session:
        scale_job(session=session, team=session.get(Team, team.id), job=session.get(Job, job_id), target_instances=1,
                  autoscale=None)
    reconcile(sender)
    assert _instances(backend, job_id) == {"gen-0": "starting", "gen-1": "stopping"}
    assert client.exists(keys.instance_stop(job_id, "gen-1"))


def test_silent_instance_is_replaced_and_lost_driver_is_restarted_then_fails(setup: Any) -> None:
    backend, client, submit, reconcile, _ = setup
    job_id = submit(generation={"instances": 1}, failover={"max_restarts": 1, "backoff_s": 0})
    sender = RecordingSender()
    reconcile(sender)
    old = datetime.now(UTC) - timedelta(seconds=60)
    with backend.session() as session:
        job = session.get(Job, job_id)
        job.status = JobStatus.running
        inst = session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == job_id))
        inst.status, inst.heartbeat_at = "running", old
    beat_driver(client, job_id, ttl_s=30)
    reconcile(sender)
    assert _instances(backend, job_id) == {"gen-0": "dead", "gen-1": "starting"}
    client.delete(keys.driver_heartbeat(job_id))  # the training worker vanished
    reconcile(sender)  # restart 1 of 1, in a new epoch
    with backend.session() as session:
        job = session.get(Job, job_id)
        assert job.status == JobStatus.running and (job.driver_epoch, job.driver_failures) == (1, 1)
    assert sender.drivers.count(job_id) == 2
    reconcile(sender)  # the new task has not beaten yet (it may wait for a training slot): not lost
    assert platform_status(backend, job_id) == JobStatus.running
    beat_driver(client, job_id, ttl_s=30)
    reconcile(sender)
    client.delete(keys.driver_heartbeat(job_id))
    reconcile(sender)  # the restarted driver died as well: the restart budget is spent
    with backend.session() as session:
        job = session.get(Job, job_id)
        assert job.status == JobStatus.failed and "the training driver died 2 times" in (job.error or "")
        assert "`resume` continues from the newest checkpoint" in (job.error or "")


def platform_status(backend: Any, job_id: int) -> JobStatus:
    with backend.session() as session:
        return JobStatus(session.get(Job, job_id).status)


def test_autoscaler_scales_generation_bound_job_up_and_training_bound_down(setup: Any) -> None:
    backend, client, submit, reconcile, _ = setup
    job_id = submit(generation={"instances": 1}, autoscale={"policy": "auto", "min_instances": 1, "max_instances": 4,
                                                            "cooldown_s": 0})
    sender = RecordingSender()
    reconcile(sender)
    beat_driver(client, job_id, ttl_s=60)
    with backend.session() as session:
        session.get(Job, job_id).status = JobStatus.running
        for i in range(3):  # generation-bound: 10 s generating vs 2 s training on 1 instance
            session.add(Iteration(job_id=job_id, iteration=i + 1,
                                  metrics={"gen_seconds": 10.0, "train_seconds": 2.0, "instances": 1}))
    reconcile(sender)
    with backend.session() as session:
        target = session.get(Job, job_id).target_instances
        event = session.scalar(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "autoscale"))
    assert target > 1
    assert event is not None and event.data["delta"] == pytest.approx(8.0) and "generation-bound" in event.message
    with backend.session() as session:  # now training-bound at the new count
        for i in range(3, 6):
            session.add(Iteration(job_id=job_id, iteration=i + 1,
                                  metrics={"gen_seconds": 1.0, "train_seconds": 10.0, "instances": target}))
    reconcile(sender)
    with backend.session() as session:
        assert session.get(Job, job_id).target_instances < target
        kinds = list(session.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id,
                                                                     JobEvent.kind == "autoscale")))
    assert any("training-bound" in k for k in kinds)


def test_autoscaler_knobs_from_the_spec_hysteresis_and_threshold(setup: Any) -> None:
    backend, client, submit, reconcile, _ = setup
    knobs = {"policy": "auto", "min_instances": 1, "max_instances": 4, "cooldown_s": 0}
    patient = submit(generation={"instances": 1}, autoscale={**knobs, "hysteresis": 4})
    cautious = submit(generation={"instances": 1}, autoscale={**knobs, "hysteresis": 1, "threshold_s": 20.0})
    eager = submit(generation={"instances": 1}, autoscale={**knobs, "hysteresis": 1, "threshold_s": 1.0})
    sender = RecordingSender()
    reconcile(sender)

    def add_iterations(job_id: int, first: int, count: int) -> None:
        beat_driver(client, job_id, ttl_s=60)
        with backend.session() as session:
            session.get(Job, job_id).status = JobStatus.running
            for i in range(first, first + count):  # generation-bound: delta 8 s > 5 s saved by a second instance
                session.add(Iteration(job_id=job_id, iteration=i + 1,
                                      metrics={"gen_seconds": 10.0, "train_seconds": 2.0, "instances": 1}))

    for job_id in (patient, cautious, eager):
        add_iterations(job_id, 0, 3)
    reconcile(sender)

    def target(job_id: int) -> int:
        with backend.session() as session:
            return int(session.get(Job, job_id).target_instances)

    assert target(patient) == 1, "3 agreeing iterations < hysteresis 4"
    assert target(cautious) == 1, "delta 8 s does not exceed 5 s saved + 20 s threshold"
    assert target(eager) > 1, "one iteration is enough at hysteresis 1; 8 s > 5 s + 1 s"
    add_iterations(patient, 3, 1)
    reconcile(sender)
    assert target(patient) > 1


def test_stopping_instance_that_goes_silent_is_dead(setup: Any) -> None:
    backend, client, submit, reconcile, team = setup
    job_id = submit(generation={"instances": 2})
    sender = RecordingSender()
    reconcile(sender)
    beat_driver(client, job_id, ttl_s=60)
    with backend.session() as session:
        session.get(Job, job_id).status = JobStatus.running
        for inst in session.scalars(select(GenerationInstance).where(GenerationInstance.job_id == job_id)):
            inst.status, inst.heartbeat_at = "running", datetime.now(UTC)
        scale_job(session=session, team=session.get(Team, team.id), job=session.get(Job, job_id), target_instances=1,
                  autoscale=None)
    reconcile(sender)
    assert _instances(backend, job_id) == {"gen-0": "running", "gen-1": "stopping"}
    with backend.session() as session:  # gen-1 dies while finishing its requests: never reports `stopped`
        inst = session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == job_id,
                                                               GenerationInstance.instance_id == "gen-1"))
        inst.heartbeat_at = datetime.now(UTC) - timedelta(seconds=60)
        session.scalar(select(GenerationInstance).where(GenerationInstance.job_id == job_id,
                                                        GenerationInstance.instance_id == "gen-0")
                       ).heartbeat_at = datetime.now(UTC)
    reconcile(sender)
    assert _instances(backend, job_id) == {"gen-0": "running", "gen-1": "dead"}  # the driver re-dispatches its stream


def test_lora_jobs_on_one_base_model_are_placed_on_shared_instances(setup: Any) -> None:
    """Sharing LoRA jobs are placed (joins list, one shared task per base model and slot, an event that says so);
    `generation.share: false` and full fine-tuning get their own instance tasks."""
    backend, client, submit, reconcile, team = setup
    lora = {"lora": {"rank": 8}}
    first, second = submit(generation={"instances": 2}, training=lora), submit(generation={"instances": 1},
                                                                              training=lora)
    own = submit(generation={"instances": 1, "share": False}, training=lora)
    full = submit(generation={"instances": 1})
    sender = RecordingSender()
    reconcile(sender)
    reconcile(sender)
    assert sorted(j for j, _ in sender.instances if j in (first, second, own, full)) == sorted([own, full])
    assert len(sender.shared) == 2 == len(set(sender.shared)), sender.shared  # slots 0 and 1, each sent once
    slot0 = next(k for k in sender.shared if k.endswith("-0"))
    placed = [json.loads(raw) for raw in client.lrange(keys.share_joins(slot0), 0, -1)]
    # (jobs are reconciled in no set order within a pass)
    assert sorted((p["job_id"], p["instance_id"]) for p in placed) == sorted([(first, "gen-0"), (second, "gen-0")])
    assert {p["weight"] for p in placed} == {8}  # the share of turns: the team's max_generation_instances quota
    slot1 = next(k for k in sender.shared if k.endswith("-1"))
    assert [json.loads(raw)["job_id"] for raw in client.lrange(keys.share_joins(slot1), 0, -1)] == [first]
    with backend.session() as session:
        messages = session.scalars(select(JobEvent.message).where(JobEvent.job_id == second)).all()
    assert any("gen-0 on a shared generation instance" in m for m in messages), messages
    # a live shared instance (its heartbeat) is not sent again: only placed
    client.set(keys.share_state(slot0), "{}", ex=30)
    client.delete(keys.share_starting(slot0))
    with backend.session() as session:  # the team runs 4 jobs at most
        cancel_job(session=session, job=session.get(Job, own))
        session.get(Team, team.id).max_generation_instances = 6  # an admin lowers the quota: later placements
    third = submit(generation={"instances": 1}, training=lora)
    reconcile(sender)
    reconcile(sender)
    assert len(sender.shared) == 2
    assert json.loads(client.lrange(keys.share_joins(slot0), -1, -1)[0]) == {"job_id": third, "instance_id": "gen-0",
                                                                          "weight": 6}
    for key in sender.shared:
        client.delete(keys.share_joins(key), keys.share_state(key), keys.share_starting(key))
