"""Sessions: logout and password change end tokens at once, login throttling (429 + Retry-After), the password
rule, and revocations (logout, member removal, key revocation) closing open SSE streams."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete

from backend.api.routes import stream as stream_routes
from backend.db.enums import Role
from backend.db.models import LoginFailure

DEFAULT_PASSWORD = "correct-horse-battery"  # the users this module makes log in with it

API = "/api/v1"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _user_with_password(backend: Any, team: Any, role: Role = Role.member) -> str:
    email = f"s-{uuid.uuid4().hex[:10]}@example.com"
    backend.make_user(team, role, email=email, password=DEFAULT_PASSWORD)
    return email


def _login(client: TestClient, email: str, password: str = DEFAULT_PASSWORD) -> str:
    response = client.post(f"{API}/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    return str(response.json()["token"])


def test_logout_ends_that_session_at_once_and_everywhere_ends_all(app_client: TestClient, world: Any) -> None:
    email = _user_with_password(world.backend, world.team)
    first, second = _login(app_client, email), _login(app_client, email)
    assert app_client.get(f"{API}/auth/me", headers=_bearer(first)).status_code == 200
    assert app_client.post(f"{API}/auth/logout", headers=_bearer(first)).status_code == 204
    after = app_client.get(f"{API}/jobs", headers=_bearer(first))
    assert after.status_code == 401 and "logged out" in after.json()["detail"]
    assert app_client.post(f"{API}/auth/logout", headers=_bearer(first)).status_code == 401  # already ended
    assert app_client.get(f"{API}/auth/me", headers=_bearer(second)).status_code == 200  # other sessions live on
    assert app_client.post(f"{API}/auth/logout?everywhere=true", headers=_bearer(second)).status_code == 204
    assert app_client.get(f"{API}/auth/me", headers=_bearer(second)).status_code == 401
    assert app_client.get(f"{API}/auth/me", headers=_bearer(_login(app_client, email))).status_code == 200


def test_an_api_key_cannot_log_out_or_change_a_password(app_client: TestClient, world: Any) -> None:
    key = app_client.post(f"{API}/keys", json={"name": "k"}, headers=world.headers("admin")).json()["secret"]
    refused = app_client.post(f"{API}/auth/logout", headers=_bearer(key))
    assert refused.status_code == 422 and "DELETE /keys" in refused.json()["detail"][0]["msg"]
    body = {"current_password": "x", "new_password": "another-long-pass"}
    assert app_client.post(f"{API}/auth/password", json=body, headers=_bearer(key)).status_code == 422


def test_password_change_checks_the_old_one_and_ends_other_sessions(app_client: TestClient, world: Any) -> None:
    email = _user_with_password(world.backend, world.team)
    token, other = _login(app_client, email), _login(app_client, email)
    for body, loc in [
        ({"current_password": "wrong-password", "new_password": "brand-new-secret"}, "current_password"),
        ({"current_password": DEFAULT_PASSWORD, "new_password": "aaaaaaaaaaaa"}, "new_password"),
        ({"current_password": DEFAULT_PASSWORD, "new_password": DEFAULT_PASSWORD}, "new_password"),
    ]:
        refused = app_client.post(f"{API}/auth/password", json=body, headers=_bearer(token))
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", loc], refused.text
    body = {"current_password": DEFAULT_PASSWORD, "new_password": "brand-new-secret"}
    changed = app_client.post(f"{API}/auth/password", json=body, headers=_bearer(token))
    assert changed.status_code == 200, changed.text
    fresh = changed.json()["token"]
    assert app_client.get(f"{API}/auth/me", headers=_bearer(fresh)).status_code == 200
    for old in (token, other):
        ended = app_client.get(f"{API}/auth/me", headers=_bearer(old))
        assert ended.status_code == 401 and "password changed" in ended.json()["detail"]
    assert app_client.post(f"{API}/auth/login", json={"email": email, "password": DEFAULT_PASSWORD}).status_code == 401
    assert _login(app_client, email, "brand-new-secret")


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("short-pw", "at least 10 characters"),
        ("aaaaabbbbbaaaaa", "5 different characters"),
        ("Password123", "too common"),
        ("xx-wilhelmina-xx", "email address's name"),
    ],
)
def test_weak_passwords_are_refused(app_client: TestClient, password: str, reason: str) -> None:
    email = f"wilhelmina@{uuid.uuid4().hex[:8]}.example.com"
    body = {"email": email, "password": password, "team_name": email}
    registered = app_client.post(f"{API}/auth/register", json=body)
    assert registered.status_code == 422 and reason in registered.json()["detail"][0]["msg"], registered.text


def test_login_throttle_per_account_and_address_answers_429_with_retry_after(world: Any) -> None:
    email = _user_with_password(world.backend, world.team)
    with world.backend.client(login_base_delay_s=300.0) as client:  # a wait no slow request outlasts
        for _ in range(world.backend.settings.login_free_failures):
            wrong = client.post(f"{API}/auth/login", json={"email": email, "password": "wrong-password"})
            assert wrong.status_code == 401
        throttled = client.post(f"{API}/auth/login", json={"email": email, "password": "wrong-password"})
        assert throttled.status_code == 429 and "too many failed logins" in throttled.json()["detail"]
        assert 1 <= int(throttled.headers["retry-after"]) <= 300
        other = _user_with_password(world.backend, world.team)
        assert _login(client, other)  # another account from the same address is not slowed down


def test_login_throttle_per_address(pg_backend: Any, world: Any) -> None:
    with pg_backend.session() as session:
        session.execute(delete(LoginFailure).where(LoginFailure.key == "address:testclient"))
    with pg_backend.client(login_max_failures_per_address=3, login_base_delay_s=300.0) as client:  # waits 30 s
        for index in range(3):
            body = {"email": f"nobody-{index}-{uuid.uuid4().hex[:6]}@example.com", "password": "wrong-password"}
            assert client.post(f"{API}/auth/login", json=body).status_code == 401
        email = _user_with_password(pg_backend, world.team)
        throttled = client.post(f"{API}/auth/login", json={"email": email, "password": DEFAULT_PASSWORD})
        assert throttled.status_code == 429 and "your address" in throttled.json()["detail"]
        assert int(throttled.headers["retry-after"]) >= 1
    with pg_backend.session() as session:
        session.execute(delete(LoginFailure).where(LoginFailure.key == "address:testclient"))


def _read_stream(url: str, headers: dict[str, str], events: list[tuple[str, Any]], opened: threading.Event) -> None:
    with httpx.stream("GET", url, headers=headers, timeout=30) as response:
        assert response.status_code == 200
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
                opened.set()


def _stream_until_revoked(live_server: str, job_id: int, headers: dict[str, str], revoke: Any) -> tuple[Any, float]:
    """Open the job's stream with `headers`, call `revoke()` once it is live; the stream's events and how long it
    stayed open after the revocation."""
    events: list[tuple[str, Any]] = []
    opened = threading.Event()
    reader = threading.Thread(
        target=_read_stream, args=(f"{live_server}{API}/jobs/{job_id}/stream", headers, events, opened), daemon=True
    )
    reader.start()
    assert opened.wait(60), "the stream sent no snapshot"
    started = time.monotonic()
    revoke()
    reader.join(timeout=60)
    assert not reader.is_alive(), "the stream stayed open after the revocation"
    return events, time.monotonic() - started


@pytest.fixture
def announced_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Streams re-check credentials only when a revocation is announced over Redis: the periodic re-check (every
    RECHECK_S) would otherwise close them too, and only a timed assertion could tell the two apart."""
    monkeypatch.setattr(stream_routes, "RECHECK_S", 3600.0)


def test_logout_closes_open_streams(live_server: str, app_client: TestClient, world: Any, announced_only: None) -> None:
    job = world.submit(app_client)
    token = _login(app_client, _user_with_password(world.backend, world.team, Role.viewer))
    events, _ = _stream_until_revoked(
        live_server, job["id"], _bearer(token), lambda: app_client.post(f"{API}/auth/logout", headers=_bearer(token))
    )
    assert [kind for kind, _ in events] == ["status", "error"] and "logged out" in events[-1][1]["detail"]
    assert httpx.get(f"{live_server}{API}/jobs/{job['id']}/stream", headers=_bearer(token)).status_code == 401


def test_member_removal_and_key_revocation_close_open_streams(
    live_server: str, app_client: TestClient, world: Any, announced_only: None
) -> None:
    job = world.submit(app_client)
    admin = world.headers("admin")
    leaver = world.backend.make_user(world.team, Role.viewer)
    events, _ = _stream_until_revoked(
        live_server,
        job["id"],
        world.backend.auth_headers(leaver, world.team),
        lambda: app_client.delete(f"{API}/teams/current/members/{leaver.id}", headers=admin),
    )
    assert events[-1][0] == "error" and "no longer a member" in events[-1][1]["detail"]
    key = app_client.post(f"{API}/keys", json={"name": "stream", "scopes": ["read"]}, headers=admin).json()
    events, _ = _stream_until_revoked(
        live_server,
        job["id"],
        _bearer(key["secret"]),
        lambda: app_client.delete(f"{API}/keys/{key['id']}", headers=admin),
    )
    assert events[-1][0] == "error" and "revoked" in events[-1][1]["detail"]
