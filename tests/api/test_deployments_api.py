"""Deployments API (no workers): create/list/show/update/delete, the 4xx that name the field, another team's ids
answering 404 (REST and /openai/v1), and generation leases: a replica's or an evaluation's slot is only granted
while the generation pool has one free, and the scheduler counts it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from backend.db import JobStatus
from backend.db.models import Checkpoint, Deployment, Team, User
from backend.services import generation_leases
from backend.services.admission import schedule_pass
from backend.services.deployments import BUSY, _wanted, start_replica
from backend.services.jobs import create_job
from contract import keys
from contract.spec import JobSpec

LORA = {"rank": 4, "alpha": 8.0}


def lora_checkpoint(world: Any, tmp_path: Path, iteration: int = 1) -> int:
    """A LoRA job of the world's team over `tiny` with one checkpoint holding an adapter directory; its id."""
    backend = world.backend
    directory = tmp_path / uuid.uuid4().hex / f"iter-{iteration}"
    (directory / "adapter").mkdir(parents=True)
    with backend.session() as session:
        team = session.get(Team, world.team.id)
        user = session.get(User, next(iter(world.users.values())).id)
        assert team is not None and user is not None
        spec = JobSpec.model_validate({"name": "lora", "model": "tiny", "dataset": {"builtin": "arithmetic"},
                                       "training": {"iterations": 1, "lora": LORA}})
        job = create_job(session=session, team=team, user=user, spec=spec)
        job.status = JobStatus.succeeded
        session.add(Checkpoint(job_id=job.id, iteration=iteration, path=str(directory)))
        session.flush()
        return int(job.id)


def test_deployment_crud_and_errors(app_client: TestClient, world: Any, other_world: Any, tmp_path: Path,
                                    redis_client: redis.Redis) -> None:
    member, viewer, other = world.headers("member"), world.headers("viewer"), other_world.headers("member")
    job_id = lora_checkpoint(world, tmp_path)
    body = {"name": "sums", "base_model": "tiny", "adapters": [f"job:{job_id}@1"], "min_replicas": 0,
            "max_replicas": 2, "idle_s": 30}
    created = app_client.post("/api/v1/deployments", json=body, headers=member)
    assert created.status_code == 201, created.text
    row = created.json()
    assert row["adapters"] == [f"job:{job_id}@1"] and row["replicas"] == [] and row["version"] == 1
    assert row["metrics"]["requests"] == 0 and row["metrics"]["p50_latency_s"] is None
    raw = redis_client.get(keys.deployment_config(row["id"]))
    assert raw is not None
    config = json.loads(raw)
    assert list(config["adapters"]) == [f"job:{job_id}@1"] and config["adapters"][f"job:{job_id}@1"].endswith(
        "iter-1/adapter")
    assert config["idle_s"] == 30 and config["min_replicas"] == 0

    assert app_client.post("/api/v1/deployments", json=body, headers=member).status_code == 409
    assert app_client.post("/api/v1/deployments", json=body, headers=viewer).status_code == 403

    def refused(overrides: dict[str, Any], field: list[Any]) -> None:
        response = app_client.post("/api/v1/deployments", json={**body, "name": "x", **overrides}, headers=member)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", *field], response.text

    refused({"base_model": "nope"}, ["base_model"])
    refused({"adapters": ["tiny"]}, ["adapters", 0])  # a model, not an adapter over tiny
    refused({"adapters": [f"job:{job_id}@1", "job:999999@best"]}, ["adapters", 1])
    refused({"min_replicas": 3, "max_replicas": 2}, ["min_replicas"])
    refused({"max_replicas": 0}, ["max_replicas"])
    refused({"name": "bad name!"}, ["name"])
    refused({"idle_s": 0}, ["idle_s"])

    listed = app_client.get("/api/v1/deployments", headers=viewer).json()
    assert [d["name"] for d in listed] == ["sums"]
    patched = app_client.patch(f"/api/v1/deployments/{row['id']}", json={"min_replicas": 1, "idle_s": 5},
                               headers=member).json()
    assert patched["min_replicas"] == 1 and patched["idle_s"] == 5 and patched["version"] == 1
    bumped = app_client.patch(f"/api/v1/deployments/{row['id']}", json={"adapters": []}, headers=member).json()
    assert bumped["version"] == 2 and bumped["adapters"] == []
    promoted = app_client.post("/api/v1/deployments/promote", json={"adapter": f"job:{job_id}@1", "name": "sums"},
                               headers=member).json()
    assert promoted["id"] == row["id"] and promoted["adapters"] == [f"job:{job_id}@1"] and promoted["version"] == 3

    for method in ("get", "delete"):  # another team's deployment: 404, as one that does not exist
        assert getattr(app_client, method)(f"/api/v1/deployments/{row['id']}", headers=other).status_code == 404
    assert app_client.patch(f"/api/v1/deployments/{row['id']}", json={"min_replicas": 0},
                            headers=other).status_code == 404
    assert app_client.get("/api/v1/deployments", headers=other).json() == []
    chat = {"model": "sums", "messages": [{"role": "user", "content": "hi"}]}
    assert app_client.post("/openai/v1/chat/completions", json=chat, headers=other).status_code == 404
    names = [m["id"] for m in app_client.get("/openai/v1/models", headers=viewer).json()["data"]]
    assert "sums" in names

    assert app_client.delete(f"/api/v1/deployments/{row['id']}", headers=member).status_code == 204
    assert app_client.get(f"/api/v1/deployments/{row['id']}", headers=member).status_code == 404
    assert redis_client.get(keys.deployment_config(row["id"])) is None


@pytest.fixture
def one_generation_slot(pg_backend: Any, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """A generation pool with exactly one free slot: the live job instances other tests of this database left behind
    hold slots of their own (the lease accounting counts them), so the pool gets one slot more than they hold."""
    client = redis_client
    with pg_backend.session() as session:
        held = generation_leases.live_job_instances(session)
    node = f"gen-{uuid.uuid4().hex[:8]}"
    client.set(keys.worker_registry(node), json.dumps({"node": node, "queues": ["generation"], "slots": held + 1}),
               ex=60)
    yield client
    client.delete(keys.worker_registry(node), keys.generation_leases())


def test_leases_take_free_generation_slots_and_the_scheduler_counts_them(
        pg_backend: Any, world: Any, one_generation_slot: redis.Redis) -> None:
    client = one_generation_slot
    client.delete(keys.generation_leases())
    with pg_backend.session() as session:
        first = generation_leases.try_acquire(session, client, team_id=world.team.id, lease="deploy-1.r0",
                                              kind="deployment", ttl_s=30)
        second = generation_leases.try_acquire(session, client, team_id=world.team.id, lease="eval:1",
                                               kind="evaluation", ttl_s=30)
    assert first.granted and not second.granted and "generation slot" in second.reason
    with Session(pg_backend.engine) as session:  # rolled back: other tests' queued jobs stay as they are
        team = session.get(Team, world.team.id)
        user = session.get(User, next(iter(world.users.values())).id)
        assert team is not None and user is not None
        job = create_job(session=session, team=team, user=user,
                         spec=JobSpec.model_validate({"name": "g", "model": "tiny",
                                                      "dataset": {"builtin": "arithmetic"}}))
        session.flush()
        result = schedule_pass(session=session, client=client, generation=(1, 1))
        assert job.id not in [j.id for j in result.admitted]  # the leased slot is not free for the job
        assert result.decisions.queue[job.id].waiting_for == "generation_slots"
        session.rollback()
    generation_leases.release(client, "deploy-1.r0")
    with pg_backend.session() as session:
        assert generation_leases.try_acquire(session, client, team_id=world.team.id, lease="eval:1",
                                             kind="evaluation", ttl_s=30).granted


def test_an_evaluation_waits_for_a_generation_slot_then_the_controller_sends_it(
        pg_backend: Any, world: Any, one_generation_slot: redis.Redis) -> None:
    """On-demand evaluations go through the scheduler's accounting: with the pool's one slot leased, the evaluation
    stays queued and unsent; once the slot is free, the controller's pass sends it (and leases the slot)."""
    from backend.services import evaluations

    client = one_generation_slot
    client.delete(keys.generation_leases())
    suite = {"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 2},
             "reward": {"type": "exact_match"}, "samples_per_prompt": 1}
    with pg_backend.session() as session:
        assert generation_leases.try_acquire(session, client, team_id=world.team.id, lease="deploy-9.r0",
                                             kind="deployment", ttl_s=30).granted
        team = session.get(Team, world.team.id)
        row = evaluations.create(session, client, team, suite=suite, model="tiny")
        evaluation_id = row.id
    assert row.status == "queued" and not client.exists(keys.evaluation_sent(evaluation_id))
    with pg_backend.session() as session:
        assert evaluation_id not in evaluations.dispatch_waiting(session, client)  # still no free slot
    generation_leases.release(client, "deploy-9.r0")
    with pg_backend.session() as session:
        assert evaluation_id in evaluations.dispatch_waiting(session, client)
    assert client.exists(keys.evaluation_sent(evaluation_id))
    assert [lease.id for lease in generation_leases.live(client)] == [evaluations.lease_id(evaluation_id)]


def test_a_busy_deployment_asks_for_its_next_replica_up_to_max_replicas(redis_client: redis.Redis) -> None:
    """Scale-out: a second replica is wanted once the ready replicas' rows in flight plus the waiting requests pass
    BUSY of their capacity, never while one is still starting, and never past max_replicas."""
    row = Deployment(id=987_654, team_id=1, name="d", base_model="tiny", adapters=[], min_replicas=0, max_replicas=2,
                     idle_s=30.0, version=1)
    waiting = keys.inference_requests(keys.deployment_key(row.id))
    redis_client.delete(waiting)
    assert _wanted(redis_client, row, [], set()) == 0  # scale from zero: the first request starts replica 0
    assert _wanted(redis_client, row, [], {0}) is None  # replica 0 is on its way
    capacity = 8
    calm = [{"replica": 0, "state": "ready", "in_flight": int(BUSY * capacity), "capacity": capacity}]
    assert _wanted(redis_client, row, calm, set()) is None  # at BUSY, not past it
    redis_client.rpush(waiting, "r1")  # one more waiting request tips it over
    assert _wanted(redis_client, row, calm, set()) == 1
    assert _wanted(redis_client, row, calm, {1}) is None  # replica 1 already starting
    two = calm + [{"replica": 1, "state": "ready", "in_flight": capacity, "capacity": capacity}]
    redis_client.rpush(waiting, *[f"r{i}" for i in range(2, 40)])
    assert _wanted(redis_client, row, two, set()) is None  # max_replicas reached, however busy
    failed = [{"replica": 0, "state": "failed"}]
    assert _wanted(redis_client, row, failed, set()) == 0  # a failed replica's slot is started again
    redis_client.delete(waiting)


def test_a_replica_past_its_start_marker_is_not_sent_again(pg_backend: Any, redis_client: redis.Redis) -> None:
    """A replica's task writes its state, then deletes its start marker: a caller that comes after must see it
    (reading the state before the marker missed it, and a second task for replica 0 ran on its one lease)."""
    row = Deployment(id=987_655, team_id=1, name="d", base_model="tiny", adapters=[], min_replicas=0, max_replicas=2,
                     idle_s=30.0, version=1)
    replica = keys.replica_key(row.id, 0)
    redis_client.delete(keys.inference_starting(replica))
    redis_client.set(keys.inference_state(replica), json.dumps({"state": "starting"}), ex=30)
    try:
        with pg_backend.session() as session:
            assert start_replica(session, redis_client, row, 0) is None
        assert not redis_client.exists(keys.inference_starting(replica))  # no task sent: each send sets the marker
    finally:
        redis_client.delete(keys.inference_state(replica), keys.inference_starting(replica))
        generation_leases.release(redis_client, replica)
