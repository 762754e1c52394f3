"""`environment.type: openenv` at submit: the server URL (or `code` to serve in the jail, not both) is required,
http(s), and passes the egress policy (backend/services/egress.py; a loopback or private server needs
STREAMRL_EGRESS_ALLOW); `requirements` pip cannot resolve name themselves: each refusal a 422 naming the field (or the
param), nothing stored; a server URL the policy allows is queued with its job."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import Job

API = "/api/v1"


def _jobs(backend: Any, team: Any) -> int:
    with backend.session() as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(Job.team_id == team.id)) or 0)


def test_bad_openenv_environments_are_422s_naming_the_field(app_client: TestClient, world: Any,
                                                            job_spec: Any) -> None:
    headers = world.headers("member")
    before = _jobs(world.backend, world.team)
    cases = [
        ({"type": "openenv"}, ["body", "environment"], "needs `url`"),
        ({"type": "openenv", "url": "file:///etc/passwd"}, ["body", "environment"], "not an http(s) URL"),
        ({"type": "openenv", "url": "http://envs.example.com", "params": {"shell": "x"}}, ["body", "environment"],
         "no param 'shell'"),
        ({"type": "openenv", "url": "http://127.0.0.1:8000"}, ["body", "environment", "url"], "loopback"),
        ({"type": "openenv", "url": "http://169.254.169.254/"}, ["body", "environment", "url"], "link-local"),
        ({"type": "calculator", "url": "http://envs.example.com"}, ["body", "environment"], "only used with type"),
        ({"type": "openenv", "code": "app = 1", "url": "http://envs.example.com"}, ["body", "environment"],
         "one of them"),
        ({"type": "openenv", "code": "app = 1", "requirements": ["openenv-core==0.0.0.999"]},
         ["body", "environment", "requirements"], "environment.requirements[0] 'openenv-core==0.0.0.999'"),
    ]
    for environment, loc, words in cases:
        response = app_client.post(f"{API}/jobs", json=job_spec(environment=environment), headers=headers)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"][:len(loc)] == loc and words in detail["msg"], detail
    assert _jobs(world.backend, world.team) == before  # nothing half-written


def test_an_openenv_job_is_queued_with_its_server(app_client: TestClient, world: Any, job_spec: Any) -> None:
    environment = {"type": "openenv", "url": "https://envs.openenv.invalid/guess", "params": {"action_field": "text"}}
    response = app_client.post(f"{API}/jobs", json=job_spec(environment=environment), headers=world.headers("member"))
    assert response.status_code == 201, response.text
    stored = response.json()["spec"]["environment"]
    assert stored["type"] == "openenv" and stored["url"] == environment["url"]
    assert stored["params"] == {"action_field": "text"}
