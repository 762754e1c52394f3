"""The same guarantees on the embedded default (SQLite): a smoke subset of the Postgres tests."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import Dataset, Job

API = "/api/v1"


@pytest.fixture
def sqlite_client(sqlite_backend: Any) -> Iterator[TestClient]:
    with sqlite_backend.client(max_upload_bytes=2000) as client:
        yield client


def _count(backend: Any, model: Any, team: Any) -> int:
    with backend.session() as session:
        return int(session.scalar(select(func.count()).select_from(model).where(model.team_id == team.id)) or 0)


def test_register_login_and_health_on_sqlite(sqlite_client: TestClient) -> None:
    assert sqlite_client.get(f"{API}/ready").json() == {"database": "ok", "redis": "ok"}
    body = {"email": "sqlite@example.com", "password": "long-enough-pw", "team_name": "sqlite-team"}
    assert sqlite_client.post(f"{API}/auth/register", json=body).status_code == 201
    login = sqlite_client.post(f"{API}/auth/login", json={"email": body["email"], "password": body["password"]})
    token = login.json()["token"]
    assert sqlite_client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {token}"}).json()["role"] == "owner"


def test_tenancy_roles_quotas_and_transitions_on_sqlite(
    sqlite_client: TestClient, sqlite_backend: Any, make_world: Any
) -> None:
    mine, theirs = make_world(sqlite_backend, max_generation_instances=2), make_world(sqlite_backend)
    member = mine.headers("member")
    job = mine.submit(sqlite_client)
    assert sqlite_client.get(f"{API}/jobs/{job['id']}", headers=theirs.headers("owner")).status_code == 404
    assert sqlite_client.post(f"{API}/jobs/{job['id']}/cancel", headers=mine.headers("viewer")).status_code == 403
    typo = sqlite_client.post(
        f"{API}/jobs", json={"model": "tiny", "dataset": {"builtin": "arithmetic"}, "sed": 1}, headers=member
    )
    assert typo.status_code == 422 and typo.json()["detail"][0]["loc"] == ["body", "sed"]
    over = sqlite_client.post(f"{API}/jobs/{job['id']}/scale", json={"target_instances": 3}, headers=member)
    assert over.status_code == 403 and over.json()["quota"] == "max_generation_instances"
    assert sqlite_client.post(f"{API}/jobs/{job['id']}/cancel", headers=member).status_code == 200
    again = sqlite_client.post(f"{API}/jobs/{job['id']}/cancel", headers=member)
    assert again.status_code == 409 and again.json()["current_status"] == "cancelled"
    assert _count(sqlite_backend, Job, mine.team) == 1
    key = sqlite_client.post(f"{API}/keys", json={"name": "k"}, headers=mine.headers("admin")).json()
    bearer = {"Authorization": f"Bearer {key['secret']}"}
    assert sqlite_client.get(f"{API}/jobs", headers=bearer).status_code == 200
    sqlite_client.delete(f"{API}/keys/{key['id']}", headers=mine.headers("admin"))
    assert sqlite_client.get(f"{API}/jobs", headers=bearer).status_code == 401


def test_dataset_refusals_on_sqlite(sqlite_client: TestClient, sqlite_backend: Any, make_world: Any) -> None:
    world = make_world(sqlite_backend)

    def upload(content: bytes) -> Any:
        files = {"file": ("d.jsonl", io.BytesIO(content))}
        return sqlite_client.post(f"{API}/datasets", data={"name": "d"}, files=files, headers=world.headers("member"))

    bad = upload(b'{"prompt": "a"}\n{"prompt": 3}\n')
    assert bad.status_code == 422 and bad.json()["detail"][0]["msg"].startswith("line 2:")
    assert upload(b'{"prompt": "aaaaaaaaaa"}\n' * 200).status_code == 413
    assert _count(sqlite_backend, Dataset, world.team) == 0
    assert upload(b'{"prompt": "a"}\n').status_code == 201


def test_sessions_and_throttle_on_sqlite(sqlite_client: TestClient) -> None:
    """Revocation cutoffs and the throttle window compare timestamps: SQLite stores them without a zone."""
    body = {"email": "sqlite-sessions@example.com", "password": "long-enough-pw", "team_name": "sqlite-sessions"}
    assert sqlite_client.post(f"{API}/auth/register", json=body).status_code == 201
    login = {"email": body["email"], "password": body["password"]}
    first = sqlite_client.post(f"{API}/auth/login", json=login).json()["token"]
    second = sqlite_client.post(f"{API}/auth/login", json=login).json()["token"]
    assert sqlite_client.post(f"{API}/auth/logout", headers={"Authorization": f"Bearer {first}"}).status_code == 204
    assert sqlite_client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {first}"}).status_code == 401
    change = {"current_password": body["password"], "new_password": "another-long-pw"}
    changed = sqlite_client.post(f"{API}/auth/password", json=change, headers={"Authorization": f"Bearer {second}"})
    assert changed.status_code == 200
    assert sqlite_client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {second}"}).status_code == 401
    fresh = {"Authorization": f"Bearer {changed.json()['token']}"}
    assert sqlite_client.get(f"{API}/auth/me", headers=fresh).status_code == 200
    for _ in range(3):  # login_free_failures: then this (account, address) waits before its next attempt
        wrong = {"email": body["email"], "password": "wrong-password"}
        assert sqlite_client.post(f"{API}/auth/login", json=wrong).status_code == 401
    throttled = sqlite_client.post(f"{API}/auth/login", json={"email": body["email"], "password": "another-long-pw"})
    assert throttled.status_code == 429 and int(throttled.headers["retry-after"]) > 0
