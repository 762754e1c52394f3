"""Sign-up, login, sessions and API keys (revocation takes effect at once)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi.testclient import TestClient

from backend.db.enums import Role

API = "/api/v1"


def _register(client: TestClient) -> tuple[str, str, dict[str, Any]]:
    email, password = f"u-{uuid.uuid4().hex[:8]}@example.com", "a-long-password"
    response = client.post(f"{API}/auth/register", json={"email": email, "password": password, "team_name": email})
    assert response.status_code == 201, response.text
    return email, password, response.json()


def test_register_login_me_and_wrong_password(app_client: TestClient) -> None:
    email, password, registered = _register(app_client)
    login = app_client.post(f"{API}/auth/login", json={"email": email.upper(), "password": password})
    assert login.status_code == 200, login.text
    body = login.json()
    assert body["team"]["name"] == registered["team_name"] and body["team"]["role"] == "owner"
    me = app_client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {body['token']}"}).json()
    assert me["user"]["email"] == email and me["role"] == "owner" and me["auth"] == "session"
    wrong = app_client.post(f"{API}/auth/login", json={"email": email, "password": "nope-nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"] == "wrong email or password"
    again = app_client.post(f"{API}/auth/register", json={"email": email, "password": password, "team_name": "x2"})
    assert again.status_code == 201 and again.json()["email"] == email  # as for a new email: no enumeration


def test_switch_team_gives_a_token_for_the_other_team(app_client: TestClient, pg_backend: Any) -> None:
    first, second = pg_backend.make_team(), pg_backend.make_team()
    user = pg_backend.make_user(first, Role.admin)
    pg_backend.add_membership(second, user, Role.viewer)
    switched = app_client.post(
        f"{API}/auth/switch-team", json={"team_id": second.id}, headers=pg_backend.auth_headers(user, first)
    )
    assert switched.status_code == 200 and switched.json()["team"]["id"] == second.id
    me = app_client.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {switched.json()['token']}"}).json()
    assert me["team"]["id"] == second.id and me["role"] == "viewer"
    stranger = pg_backend.make_team()
    refused = app_client.post(
        f"{API}/auth/switch-team", json={"team_id": stranger.id}, headers=pg_backend.auth_headers(user, first)
    )
    assert refused.status_code == 403


def test_missing_and_forged_tokens_are_401(app_client: TestClient) -> None:
    assert app_client.get(f"{API}/jobs").status_code == 401
    forged = app_client.get(f"{API}/jobs", headers={"Authorization": "Bearer sess_eyJ1IjoxfQ.bad"})
    assert forged.status_code == 401 and forged.json()["detail"] == "invalid session token"
    unknown_key = app_client.get(f"{API}/jobs", headers={"Authorization": "Bearer srl_000000000000_nope"})
    assert unknown_key.status_code == 401


def test_api_key_shown_once_works_and_revocation_is_immediate(app_client: TestClient, world: Any) -> None:
    admin = world.headers(Role.admin)
    created = app_client.post(f"{API}/keys", json={"name": "ci"}, headers=admin)
    assert created.status_code == 201, created.text
    key = created.json()
    assert key["secret"].startswith(f"tml-{key['prefix']}_") and key["scopes"] == ["read", "write"]
    bearer = {"Authorization": f"Bearer {key['secret']}"}
    assert app_client.get(f"{API}/jobs", headers=bearer).status_code == 200
    listed = app_client.get(f"{API}/keys", headers=admin).json()
    assert all("secret" not in k for k in listed["data"])
    assert next(k for k in listed["data"] if k["id"] == key["id"])["last_used_at"] is not None
    assert app_client.delete(f"{API}/keys/{key['id']}", headers=admin).status_code == 204
    refused = app_client.get(f"{API}/jobs", headers=bearer)
    assert refused.status_code == 401 and refused.json()["detail"] == "API key revoked"


def test_read_only_key_cannot_submit_and_key_role_is_capped_by_creator(app_client: TestClient, world: Any) -> None:
    created = app_client.post(f"{API}/keys", json={"name": "ro", "scopes": ["read"]}, headers=world.headers("admin"))
    bearer = {"Authorization": f"Bearer {created.json()['secret']}"}
    assert app_client.get(f"{API}/jobs", headers=bearer).status_code == 200
    refused = app_client.post(
        f"{API}/jobs", json={"model": "tiny", "dataset": {"builtin": "arithmetic"}}, headers=bearer
    )
    assert refused.status_code == 403 and "member" in refused.json()["detail"]
    bad_scope = app_client.post(f"{API}/keys", json={"name": "x", "scopes": ["root"]}, headers=world.headers("admin"))
    assert bad_scope.status_code == 422 and bad_scope.json()["detail"][0]["loc"] == ["body", "scopes"]


def test_removed_member_is_refused_at_once(app_client: TestClient, world: Any) -> None:
    member = world.users[Role.member]
    headers = world.headers(Role.member)
    assert app_client.get(f"{API}/jobs", headers=headers).status_code == 200
    removed = app_client.delete(f"{API}/teams/current/members/{member.id}", headers=world.headers(Role.admin))
    assert removed.status_code == 204
    assert app_client.get(f"{API}/jobs", headers=headers).status_code == 401
