"""Every object is scoped to the caller's team (another team's objects answer 404) and roles are enforced."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastapi.testclient import TestClient
from minimal_model import write_minimal_model

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


def test_member_management_rules(app_client: TestClient, world: Any, pg_backend: Any) -> None:
    admin, owner = world.headers("admin"), world.headers("owner")
    person = pg_backend.make_user(email=f"Fresh.Person-{world.team.id}@example.com".lower())
    invited = app_client.post(
        f"{API}/teams/current/members", json={"email": person.email.upper(), "role": "member"}, headers=admin
    )
    assert invited.status_code == 201 and invited.json()["email"] == person.email
    assert invited.json()["status"] == "pending"  # nobody joins without accepting
    own_team = pg_backend.make_team()
    pg_backend.add_membership(own_team, person, "owner")
    accepted = app_client.post(
        f"{API}/auth/invitations/{invited.json()['id']}/accept", headers=pg_backend.auth_headers(person, own_team)
    )
    assert accepted.status_code == 200, accepted.text
    assert (
        app_client.post(f"{API}/teams/current/members", json={"email": person.email}, headers=admin).status_code
        == 409
    )
    owner_id = world.users[Role.owner].id
    assert app_client.delete(f"{API}/teams/current/members/{owner_id}", headers=admin).status_code == 403
    promote = app_client.patch(f"{API}/teams/current/members/{person.id}", json={"role": "owner"}, headers=admin)
    assert promote.status_code == 403 and "owner" in promote.json()["detail"]
    by_owner = app_client.patch(f"{API}/teams/current/members/{person.id}", json={"role": "admin"}, headers=owner)
    assert by_owner.status_code == 200 and by_owner.json()["role"] == "admin"
    members = app_client.get(f"{API}/teams/current/members", headers=world.headers("viewer")).json()
    assert {m["role"] for m in members} == {"owner", "admin", "member", "viewer"}


def _fake_checkpoint(backend: Any, job_id: int, name: str = "iter_000010") -> Any:
    return write_minimal_model(backend.settings.artifacts / "jobs" / str(job_id) / "checkpoints" / name)


def test_model_registration_is_limited_to_the_teams_own_job_artifacts(
    app_client: TestClient, world: Any, other_world: Any, tmp_path: Any
) -> None:
    backend = world.backend
    job = world.submit(app_client)
    checkpoint = _fake_checkpoint(backend, job["id"])
    weights = write_minimal_model(backend.settings.artifacts / "jobs" / str(job["id"]) / "weights")
    relative = f"jobs/{job['id']}/checkpoints/iter_000010"
    write_minimal_model(backend.settings.artifacts / "datasets" / str(world.team.id) / "fake-model")
    link = backend.settings.artifacts / "models" / f"link-{job['id']}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(checkpoint)
    outsider = other_world.headers("owner")
    for path in [
        relative,
        str(checkpoint),
        str(weights),
        f"models/../{relative}",
        f"models/link-{job['id']}",  # a symlink under the shared dir resolves into A's job: refused
        f"jobs/{job['id']}",
        "jobs/999999/checkpoints/iter_000010",
        f"datasets/{world.team.id}/fake-model",
        ".",
    ]:
        refused = app_client.post(f"{API}/models", json={"name": "stolen", "path": path}, headers=outsider)
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["detail"][0]["loc"] == ["body", "path"]
    # An allow-listed root that contains the artifact dir does not open other teams' jobs either.
    with backend.client(allowed_model_roots=[backend.settings.data_dir]) as client:
        refused = client.post(f"{API}/models", json={"name": "stolen", "path": str(checkpoint)}, headers=outsider)
        assert refused.status_code == 422, refused.text
    listed = app_client.get(f"{API}/models", headers=outsider).json()
    assert "stolen" not in {m["name"] for m in listed["data"]}
    # The owning team may continue from its own checkpoint (relative or absolute) and its weights.
    member = world.headers("member")
    for name, path in [("ckpt", relative), ("ckpt-abs", str(checkpoint)), ("weights", str(weights))]:
        created = app_client.post(f"{API}/models", json={"name": name, "path": path}, headers=member)
        assert created.status_code == 201, created.text
    assert created.json()["path"] == str(weights.resolve())
    spec = {"model": "ckpt", "dataset": {"builtin": "arithmetic"}}
    assert app_client.post(f"{API}/jobs", json=spec, headers=member).status_code == 201
    assert app_client.post(f"{API}/jobs", json=spec, headers=outsider).status_code == 422


def test_only_platform_admins_change_the_device_catalog(pg_backend: Any, world: Any, other_world: Any) -> None:
    update = {"bf16_tflops": 1300, "mem_bandwidth_tbps": 5.3, "memory_gb": 192, "cost_per_hour": 1.1}
    operator = pg_backend.make_user(other_world.team, Role.viewer)
    with pg_backend.client(platform_admins=[operator.email.upper()]) as client:
        for role in Role:  # every role of a self-registered team, owner included
            for team_world in (world, other_world):
                headers = team_world.headers(role)
                assert client.put(f"{API}/plans/devices/H800", json=update, headers=headers).status_code == 403
                assert client.delete(f"{API}/plans/devices/H800", headers=headers).status_code == 403
        devices = client.get(f"{API}/plans/devices", headers=world.headers("viewer")).json()["data"]
        assert not any(d["overridden"] for d in devices if d["name"] == "H800")
        ops = pg_backend.auth_headers(operator, other_world.team)
        assert client.get(f"{API}/auth/me", headers=ops).json()["platform_admin"] is True
        assert client.get(f"{API}/auth/me", headers=world.headers("owner")).json()["platform_admin"] is False
        created = client.put(f"{API}/plans/devices/TestChip", json=update, headers=ops)
        assert created.status_code == 200 and created.json()["overridden"] is True
        seen = client.get(f"{API}/plans/devices", headers=world.headers("viewer")).json()["data"]
        assert "TestChip" in {d["name"] for d in seen}  # one catalog for every team
        read_key = client.post(f"{API}/keys", json={"name": "ro", "scopes": ["read"]}, headers=world.headers("admin"))
        key_headers = {"Authorization": f"Bearer {read_key.json()['secret']}"}
        assert client.delete(f"{API}/plans/devices/TestChip", headers=key_headers).status_code == 403
        assert client.delete(f"{API}/plans/devices/TestChip", headers=ops).status_code == 204


def test_the_first_registered_user_is_the_platform_admin(redis_url: str, tmp_path: Any) -> None:
    from backend.db.migrate import upgrade_database
    from backend.main import create_app
    from contract.settings import Settings

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    upgrade_database(url)
    settings = Settings(database_url=url, redis_url=redis_url, data_dir=tmp_path,
                        secret_key="fresh-install-secret-0123456789ab", auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        flags = []
        for name in ("first", "second"):
            body = {"email": f"{name}@example.com", "password": "a-long-password", "team_name": name}
            assert client.post(f"{API}/auth/register", json=body).status_code == 201
            token = client.post(f"{API}/auth/login", json=body).json()["token"]
            flags.append(client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {token}"}).json())
    assert [me["platform_admin"] for me in flags] == [True, False]
