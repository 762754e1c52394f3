"""The trajectory explorer's API: `GET /jobs/{id}/samples` filtered by reward, length, policy version, staleness and
mismatch, and `GET /jobs/{id}/samples/{sample_id}/tokens` (the per-token record), on PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

import pytest

from backend.db.models import JobSample
from backend.services.jobs import create_job
from contract.spec import JobSpec

API = "/api/v1"


def _trace(length: int, version: int) -> dict[str, Any]:
    return {"pieces": [f"t{i}" for i in range(length)], "behaviour": [-1.0] * length,
            "current": [-1.1] * length, "versions": [[0, version]], "trained_version": version,
            "advantage": 0.5, "loss_mask": None, "mismatch": 0.004}


@pytest.mark.parametrize("backend_name", ["pg_backend", "sqlite_backend"])
def test_filters_and_the_per_token_record(backend_name: str, request: pytest.FixtureRequest,
                                          register_model: Any) -> None:
    backend = request.getfixturevalue(backend_name)
    team = backend.make_team()
    user = backend.make_user(team=team)
    register_model(backend, team)
    spec = JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"}})
    with backend.session() as session:
        job_id = create_job(session=session, team=session.merge(team), user=session.merge(user), spec=spec).id
        # (iteration, reward, length, policy_version, mismatch): staleness = iteration - 1 - policy_version
        rows = [(1, 0.0, 3, 0, 0.0001), (2, 1.0, 5, 1, 0.02), (3, 0.5, 8, 1, None), (4, 1.0, 2, 3, 0.5)]
        for number, (iteration, reward, length, version, mismatch) in enumerate(rows):
            session.add(JobSample(job_id=job_id, iteration=iteration, sample_id=f"s{number}", prompt="p",
                                  response="r", reward=reward, length=length, policy_version=version,
                                  tokens=None if mismatch is None else _trace(length, iteration - 1),
                                  mismatch=mismatch))
    headers = backend.auth_headers(user, team)

    def ids(**params: Any) -> list[str]:
        answer = client.get(f"{API}/jobs/{job_id}/samples", params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        return sorted(s["sample_id"] for s in answer.json()["data"])

    with backend.client() as client:
        assert ids() == ["s0", "s1", "s2", "s3"]
        assert ids(min_reward=0.5) == ["s1", "s2", "s3"] and ids(max_reward=0.5) == ["s0", "s2"]
        assert ids(min_length=3, max_length=5) == ["s0", "s1"]
        assert ids(policy_version=1) == ["s1", "s2"]
        assert ids(min_staleness=1) == ["s2"] and ids(max_staleness=0) == ["s0", "s1", "s3"]
        assert ids(min_mismatch=0.01) == ["s1", "s3"]
        assert ids(min_reward=1.0, min_mismatch=0.1) == ["s3"]
        answer = client.get(f"{API}/jobs/{job_id}/samples", params={"min_mismatch": -1}, headers=headers)
        assert answer.status_code == 422 and "min_mismatch" in answer.text
        listed = client.get(f"{API}/jobs/{job_id}/samples", params={"min_mismatch": 0.3}, headers=headers).json()
        assert listed["data"][0]["mismatch"] == 0.5

        record = client.get(f"{API}/jobs/{job_id}/samples/s1/tokens", headers=headers)
        assert record.status_code == 200, record.text
        body = record.json()
        assert body["pieces"] == [f"t{i}" for i in range(5)] and body["current"] == [-1.1] * 5
        assert body["trained_version"] == 1 and body["advantage"] == 0.5 and body["reward"] == 1.0
        assert body["versions"] == [[0, 1]] and body["mismatch"] == 0.02 and body["iteration"] == 2
        assert client.get(f"{API}/jobs/{job_id}/samples/s2/tokens", headers=headers).status_code == 404  # none kept
        assert client.get(f"{API}/jobs/{job_id}/samples/nope/tokens", headers=headers).status_code == 404
        other = backend.make_team()
        foreign = backend.auth_headers(backend.make_user(team=other), other)
        assert client.get(f"{API}/jobs/{job_id}/samples/s1/tokens", headers=foreign).status_code == 404
