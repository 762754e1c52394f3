"""`GET /jobs/{id}/iterations` splices the stored metrics text into its JSON (services/json_pages.py; PostgreSQL
renders it in one aggregate): the answer must equal what `Page[IterationPublic]` serializes, on PostgreSQL and
SQLite, including non-finite values (null, as pydantic writes them), nested values, unicode and paging."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backend.db.models import Iteration
from backend.schemas.common import Page
from backend.schemas.jobs import IterationPublic
from backend.services.job_data import record_iteration
from backend.services.jobs import create_job
from contract.spec import JobSpec

API = "/api/v1"
METRICS: list[dict[str, Any]] = [
    {"reward_mean": 0.5, "lengths": [3, 5, 8]},
    {"reward_mean": float("nan"), "kl": float("inf"), "nested": {"a": [float("-inf"), 1.0]}},
    {"note": 'naïve “quotes” \\ and "NaN" in text', "samples_per_s": 1e-9, "big": 12345678901234},
    {},
]


@pytest.mark.parametrize("backend_name", ["pg_backend", "sqlite_backend"])
def test_iterations_json_equals_the_schema_serialization(
    backend_name: str, request: pytest.FixtureRequest, register_model: Any
) -> None:
    backend = request.getfixturevalue(backend_name)
    team = backend.make_team()
    user = backend.make_user(team=team)
    register_model(backend, team)
    spec = JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"}})
    with backend.session() as session:
        job_id = create_job(session=session, team=session.merge(team), user=session.merge(user), spec=spec).id
        for number, metrics in enumerate(METRICS, start=1):
            record_iteration(session=session, job_id=job_id, iteration=number, metrics=metrics)
        if backend_name == "sqlite_backend":  # a row stored before record_iteration nulled non-finite numbers
            session.add(Iteration(job_id=job_id, iteration=len(METRICS) + 1, metrics={"kl": float("nan")}))
    headers = backend.auth_headers(user, team)
    with backend.client() as client:
        for params in ({}, {"after": 1, "limit": 2}, {"after": 3}, {"after": 99}):
            answer = client.get(f"{API}/jobs/{job_id}/iterations", params=params, headers=headers)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            with backend.session() as session:
                after, limit = params.get("after", -1), params.get("limit", 1000)
                rows = session.query(Iteration).filter(Iteration.job_id == job_id, Iteration.iteration > after)
                rows = rows.order_by(Iteration.iteration).limit(limit).all()
                expected = Page[IterationPublic](
                    data=[IterationPublic.model_validate(r) for r in rows], count=len(rows)
                ).model_dump_json()
            assert json.loads(answer.content) == json.loads(expected)
        assert client.get(f"{API}/jobs/{job_id + 10_000}/iterations", headers=headers).status_code == 404
