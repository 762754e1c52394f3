"""Usage and budgets at the API and in the controller's budget pass, on real Postgres and Redis: usage recorded with
iterations (per job, team and API key), GET /usage groupings and CSV, team scoping (another team's ids are 404 and its
usage invisible), the team's monthly budget refusing submissions, the job limits pausing and resuming a job, and bad
limits refused naming the field."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.controller.budgets import enforce_budgets
from backend.db.enums import JobStatus, Role
from backend.db.models import Job, JobEvent, UsageRecord
from backend.services.job_data import record_iteration
from backend.services.usage import iteration_usage

API = "/api/v1"
# one disaggregated iteration: 10 s on 1 training device with 2 live instances; 40 tokens sampled, 100 processed
ROW = {"iteration_seconds": 10.0, "gen_seconds": 6.0, "instances_live": 2, "tokens_generated": 40.0,
       "tokens_trained": 100.0, "loss": 0.5}


def _key(client: TestClient, world: Any, name: str) -> tuple[int, dict[str, str]]:
    made = client.post(f"{API}/keys", json={"name": name}, headers=world.headers(Role.admin))
    assert made.status_code == 201, made.text
    return made.json()["id"], {"Authorization": f"Bearer {made.json()['secret']}"}


def _record(backend: Any, job_id: int, iterations: range, row: dict[str, Any] = ROW) -> None:
    with backend.session() as session:
        for it in iterations:
            record_iteration(session=session, job_id=job_id, iteration=it, metrics=dict(row))


def _set_status(backend: Any, job_id: int, status: JobStatus) -> None:
    with backend.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.status = status


def _events(backend: Any, job_id: int, kind: str) -> list[JobEvent]:
    with backend.session() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == kind)
                               .order_by(JobEvent.id))
        return list(rows)


def test_iteration_usage_rules() -> None:
    sync = iteration_usage({"mode": "sync", "training": {"devices": 2}}, ROW)
    assert [(s.pool, s.device_seconds, s.tokens_generated, s.tokens_trained) for s in sync] == [
        ("generation", 20.0, 40, 0), ("training", 20.0, 0, 100)]
    vllm = iteration_usage({"mode": "async", "generation": {"engine": "vllm", "vllm": {"tensor_parallel_size": 4}}},
                           ROW)
    assert vllm[0].device_seconds == 10.0 * 2 * 4
    colocated = iteration_usage({"mode": "colocated"}, ROW)  # generation ran on the training device
    assert [(s.pool, s.device_seconds) for s in colocated] == [("generation", 6.0), ("training", 4.0)]
    tinker = iteration_usage({}, {"step_seconds": 0.25, "tokens": 64, "loss": 1.0})
    assert [(s.pool, s.device_seconds, s.tokens_trained) for s in tinker] == [("training", 0.25, 64)]
    assert iteration_usage({}, {"loss": 1.0}) == []  # nothing measured: no row


def test_usage_is_recorded_per_job_team_and_key_grouped_and_as_csv(app_client: TestClient, world: Any,
                                                                   other_world: Any) -> None:
    key_id, bearer = _key(app_client, world, "ci")
    by_key = app_client.post(f"{API}/jobs", json={"name": "by-key", "model": "tiny",
                                                   "dataset": {"builtin": "arithmetic"}}, headers=bearer)
    assert by_key.status_code == 201, by_key.text
    by_session = world.submit(app_client, name="by-session")
    theirs = other_world.submit(app_client, name="theirs")
    _record(world.backend, by_key.json()["id"], range(1, 4))
    _record(world.backend, by_session["id"], range(1, 2))
    _record(world.backend, theirs["id"], range(1, 6))
    _record(world.backend, by_key.json()["id"], range(3, 4))  # recorded again (a resumed driver): replaced, not added

    viewer = world.headers(Role.viewer)
    team = app_client.get(f"{API}/usage", headers=viewer)
    assert team.status_code == 200, team.text
    body = team.json()
    assert body["group_by"] == "team" and len(body["rows"]) == 1
    row = body["rows"][0]
    assert row["id"] == world.team.id and row["name"] == world.team.name
    # 4 iterations of ours: 10 s x 1 training device, 10 s x 2 instances, 40 and 100 tokens each
    assert row["training_device_seconds"] == pytest.approx(40.0)
    assert row["generation_device_seconds"] == pytest.approx(80.0)
    assert row["device_seconds"] == pytest.approx(120.0)
    assert (row["tokens_generated"], row["tokens_trained"]) == (160, 400)
    assert body["total"]["device_seconds"] == pytest.approx(120.0)
    assert body["budget"] == {"max_device_hours_per_month": None, "used_device_hours_this_month": pytest.approx(
        120.0 / 3600), "month_start": body["budget"]["month_start"]}

    jobs = app_client.get(f"{API}/usage", params={"group_by": "job"}, headers=viewer).json()["rows"]
    assert [(r["id"], r["name"], r["device_seconds"]) for r in jobs] == [
        (by_key.json()["id"], "by-key", pytest.approx(90.0)), (by_session["id"], "by-session", pytest.approx(30.0))]
    keys = app_client.get(f"{API}/usage", params={"group_by": "key"}, headers=viewer).json()["rows"]
    assert [(r["id"], r["name"], r["device_seconds"]) for r in keys] == [
        (key_id, "ci", pytest.approx(90.0)), (None, "sessions (no API key)", pytest.approx(30.0))]
    days = app_client.get(f"{API}/usage", params={"group_by": "day"}, headers=viewer).json()["rows"]
    assert len(days) == 1 and days[0]["id"] is None and days[0]["device_seconds"] == pytest.approx(120.0)
    one_key = app_client.get(f"{API}/usage", params={"group_by": "job", "key_id": key_id}, headers=viewer).json()
    assert [r["id"] for r in one_key["rows"]] == [by_key.json()["id"]]

    as_csv = app_client.get(f"{API}/usage", params={"group_by": "job", "format": "csv"}, headers=viewer)
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [(r["id"], r["name"], float(r["device_seconds"]), int(r["tokens_generated"])) for r in table] == [
        (str(by_key.json()["id"]), "by-key", 90.0, 120), (str(by_session["id"]), "by-session", 30.0, 40)]
    accepted = app_client.get(f"{API}/usage", headers={**viewer, "Accept": "text/csv"})
    assert accepted.headers["content-type"].startswith("text/csv") and "team," in accepted.text

    # a window before anything was recorded is empty
    empty = app_client.get(f"{API}/usage", params={"from": "2020-01-01", "to": "2020-02-01"}, headers=viewer).json()
    assert empty["rows"][0]["device_seconds"] == 0.0


def test_usage_is_team_scoped(app_client: TestClient, world: Any, other_world: Any) -> None:
    theirs = other_world.submit(app_client, name="theirs")
    _record(world.backend, theirs["id"], range(1, 3))
    their_key, _ = _key(app_client, other_world, "their-key")
    admin = world.headers(Role.admin)
    for params in ({"job_id": theirs["id"]}, {"key_id": their_key}):
        missing = app_client.get(f"{API}/usage", params=params, headers=admin)
        assert missing.status_code == 404, missing.text
    ours = app_client.get(f"{API}/usage", params={"group_by": "job"}, headers=admin).json()
    assert theirs["id"] not in [r["id"] for r in ours["rows"]]
    mine = app_client.get(f"{API}/usage", params={"group_by": "job"}, headers=other_world.headers(Role.viewer))
    assert [r["id"] for r in mine.json()["rows"]] == [theirs["id"]]


def test_bad_usage_queries_are_422(app_client: TestClient, world: Any) -> None:
    viewer = world.headers(Role.viewer)
    for params, field in (({"group_by": "user"}, "group_by"), ({"from": "2026-02-01", "to": "2026-01-01"}, "from"),
                          ({"from": "yesterday"}, "from"), ({"format": "xml"}, "format")):
        answer = app_client.get(f"{API}/usage", params=params, headers=viewer)
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"][-1] == field


def test_negative_limits_are_422_naming_the_field(app_client: TestClient, world: Any) -> None:
    member = world.headers(Role.member)
    for limits, field in (({"max_device_seconds": -5}, "max_device_seconds"), ({"max_tokens": -1}, "max_tokens")):
        spec = {"name": "x", "model": "tiny", "dataset": {"builtin": "arithmetic"}, "limits": limits}
        answer = app_client.post(f"{API}/jobs", json=spec, headers=member)
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"][0]["loc"] == ["body", "limits", field]
    job = world.submit(app_client)
    patched = app_client.patch(f"{API}/jobs/{job['id']}", json={"limits": {"max_device_seconds": -1}}, headers=member)
    assert patched.status_code == 422 and patched.json()["detail"][0]["loc"] == ["body", "limits", "max_device_seconds"]
    quota = app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": -2},
                             headers=world.headers(Role.admin))
    assert quota.status_code == 422 and quota.json()["detail"][0]["loc"] == ["body", "max_device_hours_per_month"]


def test_a_team_over_its_monthly_budget_cannot_submit(app_client: TestClient, world: Any) -> None:
    admin = world.headers(Role.admin)
    job = world.submit(app_client)
    _record(world.backend, job["id"], range(1, 4))  # 90 device-seconds
    set_budget = app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": 0.02},
                                  headers=admin)  # 72 device-seconds
    assert set_budget.status_code == 200 and set_budget.json()["quotas"]["max_device_hours_per_month"] == 0.02
    refused = app_client.post(f"{API}/jobs", json={"name": "more", "model": "tiny",
                                                   "dataset": {"builtin": "arithmetic"}}, headers=admin)
    assert refused.status_code == 403, refused.text
    assert refused.json()["budget"] == "max_device_hours_per_month"
    assert "max_device_hours_per_month" in refused.json()["detail"] and "used up" in refused.json()["detail"]
    raised = app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": None}, headers=admin)
    assert raised.json()["quotas"]["max_device_hours_per_month"] is None
    assert world.submit(app_client, name="again")["status"] == "queued"


def test_the_budget_pass_warns_pauses_and_resumes_when_the_limit_is_raised(
        app_client: TestClient, world: Any, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    member = world.headers(Role.member)
    job = world.submit(app_client, limits={"max_device_seconds": 100})
    _set_status(world.backend, job["id"], JobStatus.running)

    def check() -> tuple[bool, bool]:  # (paused, resumed) this job; other tests' jobs may share the database
        with world.backend.session() as session:
            paused, resumed = enforce_budgets(session, client)
        return job["id"] in paused, job["id"] in resumed

    _record(world.backend, job["id"], range(1, 3))  # 60 of 100: nothing yet
    assert check() == (False, False) and not _events(world.backend, job["id"], "budget_warning")
    _record(world.backend, job["id"], range(3, 4))  # 90: a warning, once
    assert check() == (False, False)
    assert check() == (False, False)
    warned = _events(world.backend, job["id"], "budget_warning")
    assert len(warned) == 1 and "limits.max_device_seconds" in warned[0].message
    assert warned[0].data is not None and warned[0].data["budget"] == "limits.max_device_seconds"
    _record(world.backend, job["id"], range(4, 5))  # 120: paused, naming the limit
    assert check() == (True, False)
    shown = app_client.get(f"{API}/jobs/{job['id']}", headers=member).json()
    assert shown["status"] == "paused"
    exceeded = _events(world.backend, job["id"], "budget_exceeded")
    assert len(exceeded) == 1 and "limits.max_device_seconds (100 device-seconds)" in exceeded[0].message
    # a user cannot resume it past the limit; raising the limit resumes it at the controller's next pass
    refused = app_client.post(f"{API}/jobs/{job['id']}/resume", headers=member)
    assert refused.status_code == 403 and refused.json()["budget"] == "limits.max_device_seconds"
    assert check() == (False, False)  # still over: stays paused
    raised = app_client.patch(f"{API}/jobs/{job['id']}", json={"limits": {"max_device_seconds": 1000}},
                              headers=member)
    assert raised.status_code == 200 and raised.json()["spec"]["limits"]["max_device_seconds"] == 1000
    assert "limits.max_device_seconds 100.0 -> 1000.0" in _events(world.backend, job["id"], "limits")[0].message
    assert check() == (False, True)
    assert app_client.get(f"{API}/jobs/{job['id']}", headers=member).json()["status"] == "running"
    assert _events(world.backend, job["id"], "budget_resumed")
    with world.backend.session() as session:
        assert session.get(Job, job["id"]).paused_for is None
    client.close()


def test_the_team_budget_pauses_its_jobs_and_a_raised_quota_resumes_them(
        app_client: TestClient, world: Any, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    admin = world.headers(Role.admin)
    job = world.submit(app_client)
    _set_status(world.backend, job["id"], JobStatus.running)
    _record(world.backend, job["id"], range(1, 3))  # 60 device-seconds
    app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": 60 / 3600}, headers=admin)
    with world.backend.session() as session:
        assert job["id"] in enforce_budgets(session, client)[0]
    exceeded = _events(world.backend, job["id"], "budget_exceeded")
    assert exceeded and exceeded[0].data is not None and exceeded[0].data["budget"] == "max_device_hours_per_month"
    assert exceeded[0].data["scope"] == "team"
    app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": 1.0}, headers=admin)
    with world.backend.session() as session:
        assert job["id"] in enforce_budgets(session, client)[1]
    client.close()


def test_budget_events_reach_the_alert_rules(app_client: TestClient, world: Any, redis_url: str) -> None:
    from backend.db.models import AlertDelivery

    admin = world.headers(Role.admin)
    rule = app_client.post(f"{API}/alerts/rules", json={"name": "budget", "events": ["budget"], "channel": "webhook",
                                                   "url": "https://hooks.example.com/x"}, headers=admin)
    assert rule.status_code == 201, rule.text
    job = world.submit(app_client, limits={"max_tokens": 150})
    _set_status(world.backend, job["id"], JobStatus.running)
    _record(world.backend, job["id"], range(1, 2))  # 140 tokens of 150: 93%
    client = redis.Redis.from_url(redis_url)
    with world.backend.session() as session:
        enforce_budgets(session, client)
    client.close()
    with world.backend.session() as session:
        deliveries = list(session.scalars(select(AlertDelivery).where(AlertDelivery.job_id == job["id"])))
        assert [d.event for d in deliveries] == ["budget"]
        assert deliveries[0].payload["data"]["budget"] == "limits.max_tokens"
        assert session.scalar(select(UsageRecord.tokens_trained).where(UsageRecord.job_id == job["id"],
                                                                      UsageRecord.pool == "training")) == 100


def test_prometheus_series_per_team(pg_backend: Any, app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client)
    _record(world.backend, job["id"], range(1, 3))  # 20 s training, 40 s generation, 80 and 200 tokens
    app_client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": 2.5},
                     headers=world.headers(Role.admin))
    with pg_backend.client(metrics_token="usage-metrics-token") as client:
        text = client.get("/metrics", headers={"Authorization": "Bearer usage-metrics-token"}).text
    team = world.team.name
    assert f'streamrl_team_device_seconds_total{{pool="training",team="{team}"}} 20.0' in text
    assert f'streamrl_team_device_seconds_total{{pool="generation",team="{team}"}} 40.0' in text
    assert f'streamrl_team_tokens_total{{kind="generated",team="{team}"}} 80.0' in text
    assert f'streamrl_team_tokens_total{{kind="trained",team="{team}"}} 200.0' in text
    assert f'streamrl_team_month_device_hours{{team="{team}"}} {60 / 3600}' in text
    assert f'streamrl_team_budget_device_hours{{team="{team}"}} 2.5' in text


def test_a_stored_spec_with_bad_limits_does_not_stop_the_budget_pass(app_client: TestClient, world: Any,
                                                                     redis_url: str) -> None:
    bad = world.submit(app_client, name="bad-limits")
    good = world.submit(app_client, name="good-limits", limits={"max_tokens": 10})
    with world.backend.session() as session:
        row = session.get(Job, bad["id"])
        assert row is not None
        row.spec, row.status = {**row.spec, "limits": {"max_tokens": "lots"}}, JobStatus.running
    _set_status(world.backend, good["id"], JobStatus.running)
    _record(world.backend, good["id"], range(1, 2))
    client = redis.Redis.from_url(redis_url)
    with world.backend.session() as session:
        paused, _ = enforce_budgets(session, client)
    client.close()
    assert good["id"] in paused and bad["id"] not in paused


def test_usage_groupings_on_sqlite(sqlite_backend: Any, make_world: Any) -> None:
    world = make_world(sqlite_backend)
    with sqlite_backend.client() as client:
        job = world.submit(client, name="on-sqlite")
        _record(sqlite_backend, job["id"], range(1, 3))
        viewer = world.headers(Role.viewer)
        for group_by, name in (("team", world.team.name), ("job", "on-sqlite"), ("key", "sessions (no API key)")):
            rows = client.get(f"{API}/usage", params={"group_by": group_by}, headers=viewer).json()["rows"]
            assert [(r["name"], r["device_seconds"]) for r in rows] == [(name, pytest.approx(60.0))]
        days = client.get(f"{API}/usage", params={"group_by": "day"}, headers=viewer).json()["rows"]
        assert len(days) == 1 and len(days[0]["name"]) == 10 and days[0]["tokens_trained"] == 200
        client.patch(f"{API}/teams/current/quotas", json={"max_device_hours_per_month": 0.01},
                     headers=world.headers(Role.admin))
        refused = client.post(f"{API}/jobs", json={"name": "x", "model": "tiny", "dataset": {"builtin": "arithmetic"}},
                              headers=world.headers(Role.member))
        assert refused.status_code == 403 and refused.json()["budget"] == "max_device_hours_per_month"


def test_job_eta_and_cost(app_client: TestClient, world: Any, other_world: Any) -> None:
    """GET /jobs/{id}/eta: no ETA before an iteration or while queued; remaining iterations x the recent median
    iteration time while running; the job's usage, its projection and the budgets beside it; 0 left once finished;
    another team's job is 404."""
    job = world.submit(app_client, name="eta", training={"iterations": 10}, limits={"max_device_seconds": 5000})
    url, viewer = f"{API}/jobs/{job['id']}/eta", world.headers(Role.viewer)
    queued = app_client.get(url, headers=viewer).json()
    assert queued["eta_s"] is None and "queued" in queued["note"] and queued["remaining_iterations"] == 10
    assert queued["usage"]["device_seconds"] == 0 and queued["projected_device_seconds"] is None
    _set_status(world.backend, job["id"], JobStatus.running)
    assert app_client.get(url, headers=viewer).json()["note"] == "no ETA before the first iteration is recorded"
    _record(world.backend, job["id"], range(1, 4))  # 3 iterations of ROW: 10 s, 20 + 10 device-seconds each
    _record(world.backend, job["id"], range(4, 5), {**ROW, "iteration_seconds": 30.0})  # 60 + 30 device-seconds
    with world.backend.session() as session:
        session.get(Job, job["id"]).current_iteration = 4
    running = app_client.get(url, headers=viewer).json()
    assert running["basis"] == "recent_iterations" and running["seconds_per_iteration"] == 10.0  # median of 10,10,10,30
    assert running["remaining_iterations"] == 6 and running["eta_s"] == 60.0 and running["finishes_at"] is not None
    assert running["usage"]["device_seconds"] == 3 * 30.0 + 90.0
    assert running["usage"]["generation_device_seconds"] == 3 * 20.0 + 60.0
    assert running["device_seconds_per_iteration"] == 45.0 and running["projected_device_seconds"] == 180.0 + 6 * 45
    assert running["max_device_seconds"] == 5000 and running["team_used_device_hours_this_month"] == 180.0 / 3600
    _set_status(world.backend, job["id"], JobStatus.succeeded)
    done = app_client.get(url, headers=viewer).json()
    assert done["eta_s"] == 0 and done["remaining_iterations"] == 0 and done["note"] is None
    assert done["projected_device_seconds"] == 180.0
    assert app_client.get(url, headers=other_world.headers(Role.owner)).status_code == 404
