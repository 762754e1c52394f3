"""Priorities, preemptible and the queue on the API (real Postgres and Redis): bad input is a 422 naming the field,
team quotas `share` and `max_priority`, and a queued job's `queue` with its holders (the caller's own named, another
team's counted)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from backend.db import Job, JobStatus
from backend.db.enums import Role
from backend.services.admission import _recent, schedule_pass
from backend.services.jobs import TrainingSlots
from contract import keys

API = "/api/v1"


def _post(client: TestClient, headers: dict[str, str], **spec: Any) -> Any:
    body = {"model": "tiny", "dataset": {"builtin": "arithmetic"}, **spec}
    return client.post(f"{API}/jobs", json=body, headers=headers)


def test_bad_priority_input_is_a_422_naming_the_field(app_client: TestClient, pg_backend: Any,
                                                       make_world: Any) -> None:
    world = make_world(pg_backend)
    member, admin = world.headers("member"), world.headers("admin")
    unknown = _post(app_client, member, priority="urgent")
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "priority"]
    above = _post(app_client, member, priority="high")
    assert above.status_code == 422 and above.json()["detail"][0]["loc"] == ["body", "priority"]
    assert "'high'" in above.json()["detail"][0]["msg"] and "max_priority 'normal'" in above.json()["detail"][0]["msg"]
    pinned = _post(app_client, member, preemptible=False)
    assert pinned.status_code == 422 and pinned.json()["detail"][0]["loc"] == ["body", "preemptible"]
    with pg_backend.session() as session:
        assert session.query(Job).filter(Job.team_id == world.team.id).count() == 0  # nothing half-written
    assert _post(app_client, admin, preemptible=False).status_code == 201
    assert _post(app_client, member, priority="low").json()["spec"]["priority"] == "low"


def test_team_share_and_max_priority_are_admin_quotas(app_client: TestClient, pg_backend: Any,
                                                      make_world: Any) -> None:
    world = make_world(pg_backend)
    member, admin = world.headers("member"), world.headers("admin")
    quotas = app_client.get(f"{API}/teams/current", headers=member).json()["quotas"]
    assert quotas["share"] == 1.0 and quotas["max_priority"] == "normal"
    assert app_client.patch(f"{API}/teams/current/quotas", json={"max_priority": "high"},
                            headers=member).status_code == 403
    bad = app_client.patch(f"{API}/teams/current/quotas", json={"share": 0}, headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "share"]
    for ranking in ({"share": 3}, {"max_priority": "high"}):  # a team cannot rank itself above the others
        refused = app_client.patch(f"{API}/teams/current/quotas", json=ranking, headers=world.headers("owner"))
        assert refused.status_code == 403 and next(iter(ranking)) in refused.json()["detail"]
    elsewhere = make_world(pg_backend)
    operator = pg_backend.make_user(elsewhere.team, Role.viewer)  # an operator account, not a member of this team
    with pg_backend.client(platform_admins=[operator.email]) as ops_client:
        ops = pg_backend.auth_headers(operator, elsewhere.team)
        assert ops_client.patch(f"{API}/teams/{world.team.id}/quotas", json={"share": 3},
                                headers=admin).status_code == 403
        assert ops_client.patch(f"{API}/teams/999999/quotas", json={"share": 3}, headers=ops).status_code == 404
        changed = ops_client.patch(f"{API}/teams/{world.team.id}/quotas", json={"max_priority": "high", "share": 3},
                                   headers=ops).json()["quotas"]
        assert changed["share"] == 3.0 and changed["max_priority"] == "high"
        assert _post(app_client, member, priority="high").status_code == 201
        lowered = ops_client.patch(f"{API}/teams/{world.team.id}/quotas", json={"max_priority": "low"}, headers=ops)
        assert lowered.json()["quotas"]["max_priority"] == "low"
    assert _post(app_client, member).json()["spec"]["priority"] == "low"  # unset: the default, at most the max
    assert app_client.patch(f"{API}/teams/current/quotas", json={"max_concurrent_jobs": 3},
                            headers=admin).status_code == 200  # the team's own caps stay the team admin's


def test_a_queued_job_says_why_and_who_holds_it(app_client: TestClient, pg_backend: Any, make_world: Any) -> None:
    client = redis.Redis.from_url(pg_backend.settings.redis_url)
    try:
        _queue_says_why(app_client, pg_backend, make_world, client)
    finally:
        client.delete(keys.scheduler_queue())  # job ids of this database mean other jobs in another test's


def _queue_says_why(app_client: TestClient, pg_backend: Any, make_world: Any, client: redis.Redis) -> None:
    ours, theirs = make_world(pg_backend, max_concurrent_jobs=1), make_world(pg_backend)
    first = ours.submit(app_client, name="first-of-ours")
    second = ours.submit(app_client, name="second-of-ours")
    hidden = theirs.submit(app_client, name="their-secret-run")
    with pg_backend.session() as session:  # the whole training pool is busy: only quotas and capacity decide
        schedule_pass(session=session, client=client, training=TrainingSlots(slots=1, free=1))
        for job_id in (first["id"], hidden["id"]):  # these two hold slots (another test's queued job may have
            session.get(Job, job_id).status = JobStatus.running  # taken the one free slot of the pass)
        session.commit()
        schedule_pass(session=session, client=client, training=TrainingSlots(slots=1, free=0))
        session.commit()
    held = app_client.get(f"{API}/jobs/{second['id']}", headers=ours.headers("member")).json()
    assert held["status"] == "queued" and held["queue"]["waiting_for"] == "quota:max_concurrent_jobs"
    assert held["queue"]["position"] >= 1
    assert f"#{first['id']} 'first-of-ours'" in held["queue"]["reason"]
    assert held["queue"]["held_by"] == [{"id": first["id"], "name": "first-of-ours"}]
    listed = app_client.get(f"{API}/jobs", headers=ours.headers("member")).json()["data"]
    assert next(j for j in listed if j["id"] == second["id"])["queue"] == held["queue"]
    assert next(j for j in listed if j["id"] == first["id"])["queue"] is None

    waiting = theirs.submit(app_client, name="their-second")
    with pg_backend.session() as session:
        schedule_pass(session=session, client=client, training=TrainingSlots(slots=1, free=0))
        session.commit()
    seen = app_client.get(f"{API}/jobs/{waiting['id']}", headers=theirs.headers("viewer")).json()["queue"]
    assert seen["waiting_for"] == "training_slots" and "0 of" in seen["reason"]
    assert seen["held_by"] == [{"id": hidden["id"], "name": "their-secret-run"}]
    assert seen["held_by_other_teams"] >= 1 and "first-of-ours" not in seen["reason"]
    listing = app_client.get(f"{API}/queue", headers=theirs.headers("viewer")).json()
    mine = [i for i in listing["items"] if i["own"]]
    assert [i["job_id"] for i in mine] == [waiting["id"]]
    others = [i for i in listing["items"] if not i["own"]]
    assert others and all(i["job_id"] is None and i["job_name"] is None and i["team"].startswith("other team")
                          for i in others)
    assert "first-of-ours" not in str(listing) and "second-of-ours" not in str(listing)
    assert any(g["own"] and g["priority"] == "normal" and g["waiting"] == 1 for g in listing["groups"])


def _gauge(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = next(line for line in text.splitlines() if line.startswith(f"{name}{{{wanted}}}"))
    return float(line.rsplit(" ", 1)[1])


def test_queue_metrics_per_pool(pg_backend: Any, make_world: Any) -> None:
    world = make_world(pg_backend, max_concurrent_jobs=0)  # nothing of this team is admitted: it all waits
    with pg_backend.client(metrics_token="queue-metrics-token") as client:
        def scrape() -> str:
            return client.get("/metrics", headers={"Authorization": "Bearer queue-metrics-token"}).text

        before = scrape()
        world.submit(client, training={"devices": 2}, generation={"instances": 3})
        world.submit(client, priority="low", mode="colocated")
        after = scrape()
    assert _gauge(after, "streamrl_queue_depth", pool="training", priority="normal") == \
        _gauge(before, "streamrl_queue_depth", pool="training", priority="normal") + 1
    assert _gauge(after, "streamrl_queue_depth", pool="training", priority="low") == \
        _gauge(before, "streamrl_queue_depth", pool="training", priority="low") + 1
    assert _gauge(after, "streamrl_queue_demand_slots", pool="training") == \
        _gauge(before, "streamrl_queue_demand_slots", pool="training") + 3
    assert _gauge(after, "streamrl_queue_demand_slots", pool="generation") == \
        _gauge(before, "streamrl_queue_demand_slots", pool="generation") + 3  # the colocated job asks for none


def test_a_job_that_ran_between_two_passes_counts_against_its_team(app_client: TestClient, pg_backend: Any,
                                                                  make_world: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Fair share's standing counts each interval between passes at what the team held from its start: a job
    admitted by one pass that ended before the next still counts (the share held at the interval's end, none by
    then, left such jobs invisible: a team of sub-second jobs took every turn in submit order)."""
    monkeypatch.setenv("STREAMRL_FAIR_SHARE_HALF_LIFE_S", "0.001")  # the standing is what was held just now
    client = redis.Redis.from_url(pg_backend.settings.redis_url)
    ours = make_world(pg_backend)
    quick = ours.submit(app_client, name="quick")
    try:
        with pg_backend.session() as session:
            schedule_pass(session=session, client=client, training=TrainingSlots(slots=1000, free=1000))
            job = session.get(Job, quick["id"])
            assert job.status == JobStatus.starting  # admitted by this pass
            job.status = JobStatus.succeeded  # and over before the next one
            session.commit()
            schedule_pass(session=session, client=client, training=TrainingSlots(slots=1000, free=1000))
            session.commit()
        assert _recent(client, time.time()).get(ours.team.id, 0.0) > 0
    finally:
        client.delete(keys.scheduler_queue(), keys.scheduler_recent())
        client.close()
