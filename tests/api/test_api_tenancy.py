"""Every object is scoped to the caller's team (another team's objects answer 404) and roles are enforced."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.db.enums import Role

API = "/api/v1"


def _upload(client: TestClient, headers: dict[str, str], content: bytes = b'{"prompt": "1+1"}\n') -> Any:
    return client.post(
        f"{API}/datasets", data={"name": "d"}, files={"file": ("d.jsonl", io.BytesIO(content))}, headers=headers
    )


def test_another_teams_objects_answer_404(app_client: TestClient, world: Any, other_world: Any) -> None:
    job = world.submit(app_client)
    dataset = _upload(app_client, world.headers("member")).json()
    key = app_client.post(f"{API}/keys", json={"name": "k"}, headers=world.headers("admin")).json()
    member_id = world.users[Role.member].id
    outsider, outsider_admin = other_world.headers("owner"), other_world.headers("admin")
    for method, path in [
        ("get", f"/jobs/{job['id']}"),
        ("post", f"/jobs/{job['id']}/cancel"),
        ("post", f"/jobs/{job['id']}/pause"),
        ("get", f"/jobs/{job['id']}/events"),
        ("get", f"/jobs/{job['id']}/iterations"),
        ("get", f"/jobs/{job['id']}/samples"),
        ("get", f"/jobs/{job['id']}/timeline"),
        ("get", f"/jobs/{job['id']}/checkpoints"),
        ("get", f"/jobs/{job['id']}/stream"),
        ("get", f"/datasets/{dataset['id']}"),
        ("get", f"/datasets/{dataset['id']}/rows"),
        ("delete", f"/keys/{key['id']}"),
        ("patch", f"/teams/current/members/{member_id}"),
        ("delete", f"/teams/current/members/{member_id}"),
    ]:
        body = {"role": "viewer"} if method == "patch" else None
        headers = outsider_admin if "member" in path else outsider
        response = app_client.request(method, API + path, headers=headers, json=body)
        assert response.status_code == 404, (method, path, response.status_code, response.text)
    scaled = app_client.post(f"{API}/jobs/{job['id']}/scale", json={"target_instances": 1}, headers=outsider)
    assert scaled.status_code == 404
    listed = app_client.get(f"{API}/jobs", headers=outsider).json()
    assert job["id"] not in [j["id"] for j in listed["data"]]
    assert dataset["id"] not in [d["id"] for d in app_client.get(f"{API}/datasets", headers=outsider).json()["data"]]
    # Another team's dataset or model cannot be named in a spec either.
    spec = {"model": "tiny", "dataset": {"id": dataset["id"]}}
    refused = app_client.post(f"{API}/jobs", json=spec, headers=outsider)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "dataset", "id"]
    # ...and the job is untouched.
    assert app_client.get(f"{API}/jobs/{job['id']}", headers=world.headers("viewer")).json()["status"] == "queued"


@pytest.mark.parametrize(
    ("method", "path", "body", "minimum"),
    [
        ("post", "/jobs", {"model": "tiny", "dataset": {"builtin": "arithmetic"}}, Role.member),
        ("post", "/models", {"name": "m2", "path": "/nowhere"}, Role.member),
        ("post", "/keys", {"name": "k"}, Role.admin),
        ("patch", "/teams/current/quotas", {"max_concurrent_jobs": 5}, Role.admin),
        ("post", "/teams/current/members", {"email": "new-person@example.com", "role": "viewer"}, Role.admin),
    ],
)
def test_roles_below_the_minimum_get_403(
    app_client: TestClient, world: Any, method: str, path: str, body: dict[str, Any], minimum: Role
) -> None:
    for role in Role:
        response = app_client.request(method, API + path, json=body, headers=world.headers(role))
        if role.at_least(minimum):
            assert response.status_code != 403, (role, response.text)
        else:
            assert response.status_code == 403, (role, response.status_code)
            assert minimum.value in response.json()["detail"]


def test_viewer_reads_but_cannot_act_on_jobs(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client)
    viewer = world.headers("viewer")
    assert app_client.get(f"{API}/jobs/{job['id']}", headers=viewer).status_code == 200
    assert app_client.get(f"{API}/jobs/{job['id']}/events", headers=viewer).status_code == 200
    for action in ("cancel", "pause", "resume"):
        assert app_client.post(f"{API}/jobs/{job['id']}/{action}", headers=viewer).status_code == 403
    assert (
        app_client.post(f"{API}/jobs/{job['id']}/scale", json={"target_instances": 2}, headers=viewer).status_code
        == 403
    )
    assert _upload(app_client, viewer).status_code == 403
    assert app_client.get(f"{API}/jobs/{job['id']}", headers=viewer).json()["status"] == "queued"


def test_member_management_rules(app_client: TestClient, world: Any) -> None:
    admin, owner = world.headers("admin"), world.headers("owner")
    added = app_client.post(
        f"{API}/teams/current/members", json={"email": "Fresh.Person@example.com", "role": "member"}, headers=admin
    )
    assert added.status_code == 201 and added.json()["email"] == "fresh.person@example.com"
    assert (
        app_client.post(
            f"{API}/teams/current/members", json={"email": "fresh.person@example.com"}, headers=admin
        ).status_code
        == 409
    )
    owner_id = world.users[Role.owner].id
    assert app_client.delete(f"{API}/teams/current/members/{owner_id}", headers=admin).status_code == 403
    promote = app_client.patch(
        f"{API}/teams/current/members/{added.json()['user_id']}", json={"role": "owner"}, headers=admin
    )
    assert promote.status_code == 403 and "owner" in promote.json()["detail"]
    by_owner = app_client.patch(
        f"{API}/teams/current/members/{added.json()['user_id']}", json={"role": "admin"}, headers=owner
    )
    assert by_owner.status_code == 200 and by_owner.json()["role"] == "admin"
    members = app_client.get(f"{API}/teams/current/members", headers=world.headers("viewer")).json()
    assert {m["role"] for m in members} == {"owner", "admin", "member", "viewer"}
