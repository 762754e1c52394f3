"""`POST /api/v1/plans` and the device catalog routes on the real app (Postgres, Redis)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration


@pytest.fixture
def headers(pg_backend: Any) -> dict[str, dict[str, str]]:
    team = pg_backend.make_team()
    headers = {role: pg_backend.auth_headers(pg_backend.make_user(team, role), team) for role in ("viewer", "admin")}
    operator = pg_backend.make_user(team, "admin")
    with pg_backend.session() as session:
        session.get(type(operator), operator.id).is_platform_admin = True  # the device catalog is the operator's
    headers["operator"] = pg_backend.auth_headers(operator, team)
    return headers


def test_post_plan(app_client: TestClient, headers: dict[str, dict[str, str]]) -> None:
    body = {"model_size": "7B", "clusters": [{"device": "H800", "count": 8}], "prompts_per_iteration": 32,
            "group_size": 4, "mode": "async", "max_staleness": 2, "dispatch": "round_robin",
            "lengths": {"max_tokens": 4000, "median": 600, "sigma": 1.0}}
    r = app_client.post("/api/v1/plans", json=body, headers=headers["viewer"])
    assert r.status_code == 200, r.text
    plan = r.json()
    assert plan["allocation"]["gen_devices"] + plan["allocation"]["train_devices"] == 8
    assert plan["predicted"]["mode"] == "async" and set(plan["per_mode"]) == {"colocated", "sync", "async"}
    span = plan["timeline"][0]
    assert set(span) == {"lane", "kind", "start", "end"}


def test_plan_errors_are_422_naming_the_problem(app_client: TestClient, headers: dict[str, dict[str, str]]) -> None:
    r = app_client.post("/api/v1/plans", json={"clusters": [{"device": "B300", "count": 8}]},
                        headers=headers["viewer"])
    assert r.status_code == 422 and "unknown device 'B300'" in r.json()["detail"][0]["msg"]
    r = app_client.post("/api/v1/plans", json={"mode": "fast"}, headers=headers["viewer"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "mode"
    r = app_client.post("/api/v1/plans", json={"max_staleness": 0}, headers=headers["viewer"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "max_staleness"
    assert app_client.post("/api/v1/plans", json={}).status_code == 401


def test_shared_jobs_split_the_generation_cost_and_never_colocated(
    app_client: TestClient, headers: dict[str, dict[str, str]]
) -> None:
    body = {"model_size": "7B", "clusters": [{"device": "H800", "count": 8}], "prompts_per_iteration": 32,
            "group_size": 4, "mode": "async", "lengths": {"max_tokens": 4000, "median": 600}}
    alone = app_client.post("/api/v1/plans", json=body, headers=headers["viewer"])
    shared = app_client.post("/api/v1/plans", json={**body, "shared_jobs": 4}, headers=headers["viewer"])
    assert alone.status_code == shared.status_code == 200, shared.text
    a = shared.json()["allocation"]
    assert a["cost_per_hour"] == pytest.approx(a["gen_devices"] / 4 + a["train_devices"])  # H800 costs 1.0
    assert shared.json()["per_mode"]["async"]["shared_jobs"] == 4
    assert shared.json()["per_mode"]["colocated"]["shared_jobs"] == 1  # simulated unshared for comparison
    assert a["cost_per_hour"] < alone.json()["allocation"]["cost_per_hour"]
    r = app_client.post("/api/v1/plans", json={**body, "mode": "colocated", "shared_jobs": 2},
                        headers=headers["viewer"])
    assert r.status_code == 422
    problem = r.json()["detail"][0]
    assert problem["loc"][-1] == "shared_jobs" and "colocated" in problem["msg"], problem
    r = app_client.post("/api/v1/plans", json={**body, "shared_jobs": 65}, headers=headers["viewer"])
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "shared_jobs"


def test_device_catalog_admin_overrides(app_client: TestClient, headers: dict[str, dict[str, str]]) -> None:
    r = app_client.get("/api/v1/plans/devices", headers=headers["viewer"])
    assert r.status_code == 200 and {d["name"] for d in r.json()["data"]} >= {"H800", "H20", "CPU"}
    update = {"bf16_tflops": 1300, "mem_bandwidth_tbps": 5.3, "memory_gb": 192, "cost_per_hour": 1.1}
    assert app_client.put("/api/v1/plans/devices/MI300X", json=update, headers=headers["viewer"]).status_code == 403
    assert app_client.put("/api/v1/plans/devices/MI300X", json=update, headers=headers["admin"]).status_code == 403
    r = app_client.put("/api/v1/plans/devices/MI300X", json=update, headers=headers["operator"])
    assert r.status_code == 200 and r.json()["overridden"] is True
    r = app_client.post("/api/v1/plans", json={"clusters": [{"device": "mi300x", "count": 4}],
                                               "prompts_per_iteration": 16, "group_size": 2},
                        headers=headers["viewer"])
    assert r.status_code == 200 and r.json()["allocation"]["gen_device"] == "MI300X"
    bad = app_client.put("/api/v1/plans/devices/X", json={**update, "memory_gb": 0}, headers=headers["operator"])
    assert bad.status_code == 422
    assert app_client.delete("/api/v1/plans/devices/MI300X", headers=headers["admin"]).status_code == 403
    assert app_client.delete("/api/v1/plans/devices/MI300X", headers=headers["operator"]).status_code == 204
    assert app_client.delete("/api/v1/plans/devices/MI300X", headers=headers["operator"]).status_code == 404


def test_plan_from_a_jobs_recorded_lengths(pg_backend: Any, app_client: TestClient) -> None:
    import json
    import uuid

    from backend.db.models import JobSample, Model

    team = pg_backend.make_team()
    member = pg_backend.auth_headers(pg_backend.make_user(team, "member"), team)
    model_dir = pg_backend.settings.artifacts / "models" / uuid.uuid4().hex
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pg_backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(model_dir)))
    spec = {"name": "lengths", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8}}
    job = app_client.post("/api/v1/jobs", json=spec, headers=member)
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    body = {"from_job_id": job_id, "prompts_per_iteration": 16, "group_size": 2,
            "clusters": [{"device": "H800", "count": 4}]}
    empty = app_client.post("/api/v1/plans", json=body, headers=member)
    assert empty.status_code == 422 and "no recorded samples" in empty.json()["detail"][0]["msg"]
    with pg_backend.session() as session:
        for i, length in enumerate([10, 20, 400]):
            session.add(JobSample(job_id=job_id, iteration=0, sample_id=f"s{i}", prompt="p", response="r",
                                  reward=0.0, length=length, policy_version=0))
    r = app_client.post("/api/v1/plans", json=body, headers=member)
    assert r.status_code == 200, r.text
    assert r.json()["predicted"]["gen_seconds"] > 0
    other = pg_backend.make_team()
    stranger = pg_backend.auth_headers(pg_backend.make_user(other, "member"), other)
    assert app_client.post("/api/v1/plans", json=body, headers=stranger).status_code == 404
