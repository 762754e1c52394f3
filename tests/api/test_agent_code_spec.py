"""`agent.code` / `agent.requirements` at submit (contract/agent.py, backend/services/agent_requirements.py): bad input
is a 422 naming the field, nothing stored. Unresolvable requirements are found by pip's resolver against the host's
configured package index (a version of a real package that does not exist)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import Job

API = "/api/v1"
AGENT = "def run(task, base_url, api_key):\n    return 1.0\n"


def _gateway_spec(job_spec: Any, **agent: Any) -> dict[str, Any]:
    return job_spec(environment={"type": "gateway"}, agent=agent)


def _jobs(backend: Any, team: Any) -> int:
    with backend.session() as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(Job.team_id == team.id)) or 0)


def test_bad_agent_code_specs_are_422s_naming_the_field(app_client: TestClient, world: Any, job_spec: Any) -> None:
    headers = world.headers("member")
    before = _jobs(world.backend, world.team)
    cases = [
        (_gateway_spec(job_spec, code=AGENT, requirements=["openai-agents==0.0.0.999"]),
         ["body", "agent", "requirements"], "agent.requirements[0] 'openai-agents==0.0.0.999'"),
        (_gateway_spec(job_spec, code=AGENT, requirements=["-e /etc"]), ["body", "agent", "requirements"],
         "requirements[0]"),
        (_gateway_spec(job_spec, code=AGENT, requirements=["pkg @ https://example.invalid/x.whl"]),
         ["body", "agent", "requirements"], "no options, URLs or paths"),
        (_gateway_spec(job_spec, code="def main():\n    pass\n"), ["body", "agent"], "run(task, base_url, api_key)"),
        (_gateway_spec(job_spec, code="def run(:\n"), ["body", "agent"], "does not compile"),
        (job_spec(agent={"code": AGENT}), ["body"], "environment.type 'gateway'"),
    ]
    for spec, loc, words in cases:
        response = app_client.post(f"{API}/jobs", json=spec, headers=headers)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"][:len(loc)] == loc and words in detail["msg"], detail
    assert _jobs(world.backend, world.team) == before  # nothing half-written


def test_an_agent_code_job_with_resolvable_requirements_is_queued(app_client: TestClient, world: Any,
                                                                  job_spec: Any) -> None:
    spec = _gateway_spec(job_spec, code=AGENT, requirements=["openai-agents==0.24.0"], concurrency=2, timeout_s=60)
    response = app_client.post(f"{API}/jobs", json=spec, headers=world.headers("member"))
    assert response.status_code == 201, response.text
    agent = response.json()["spec"]["agent"]
    assert agent["requirements"] == ["openai-agents==0.24.0"] and agent["concurrency"] == 2
