"""What a hostile user can do with the login and registration endpoints: lock another user out (no: the throttle
slows the (account, address) that fails), pick the address the limits key on with X-Forwarded-For (no: only from
configured proxies), and learn which emails have accounts (no: registration answers the same)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from fastapi.testclient import TestClient
from waiting import api_in_thread

from backend.api.proxies import uvicorn_proxy_options
from backend.db.base import utcnow
from backend.db.models import LoginFailure
from backend.main import create_app

API = "/api/v1"
PASSWORD = "correct-horse-battery"


def _user(backend: Any, team: Any) -> str:
    email = f"v-{uuid.uuid4().hex[:10]}@example.com"
    backend.make_user(team, email=email, password=PASSWORD)
    return email


def _login(client: Any, email: str, password: str = PASSWORD) -> Any:
    return client.post(f"{API}/auth/login", json={"email": email, "password": password})


def test_wrong_passwords_from_one_address_never_lock_the_owner_out(pg_backend: Any, world: Any) -> None:
    email = _user(pg_backend, world.team)
    app = create_app(pg_backend.settings.model_copy(update={"login_base_delay_s": 300.0}))  # no wait runs out here
    with TestClient(app, client=("10.66.0.1", 40000)) as attacker:
        answers = [_login(attacker, email, "wrong-password").status_code for _ in range(6)]
        assert answers == [401, 401, 401, 429, 429, 429], answers  # three free failures, then this address waits
        owner = TestClient(app, client=("10.77.0.2", 40000))  # the owner's own address has not failed
        assert _login(owner, email).status_code == 200
        throttled = _login(attacker, email)  # the right password from the failing address waits too
        assert throttled.status_code == 429 and "from your address" in throttled.json()["detail"]


def test_each_failure_past_the_free_ones_doubles_the_wait(pg_backend: Any, world: Any) -> None:
    email = _user(pg_backend, world.team)
    app = create_app(pg_backend.settings.model_copy(update={"login_free_failures": 2, "login_base_delay_s": 2.0}))
    statuses, waits = [], []
    with TestClient(app, client=("10.66.1.1", 40000)) as client:
        deadline = time.monotonic() + 90
        while len(waits) < 3:  # keep guessing, waiting out each delay (polling: no fixed sleeps)
            assert time.monotonic() < deadline, statuses
            answer = _login(client, email, "wrong-password")
            if answer.status_code == 429 and statuses[-1] == 401:
                waits.append(int(answer.headers["retry-after"]))  # the wait the latest failure earned
            statuses.append(answer.status_code)
            time.sleep(0.0 if answer.status_code == 401 else 0.2)
        assert statuses[:3] == [401, 401, 429], statuses  # two free failures, then 2, 4, 8 s after each
        assert len(waits) == 3 and waits == sorted(waits) and waits[-1] >= 5, waits
        while (answer := _login(client, email)).status_code == 429:
            assert time.monotonic() < deadline + 30
            time.sleep(0.2)
        assert answer.status_code == 200  # the right password after the wait; it clears the address's failures
        assert _login(client, email, "wrong-password").status_code == 401


def test_failures_of_others_on_a_shared_address_slow_the_owner_down_but_never_lock_them_out(
    pg_backend: Any, world: Any
) -> None:
    email = _user(pg_backend, world.team)
    shared = f"10.55.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"  # one NAT: attackers and the victim
    with pg_backend.session() as session:  # the review's numbers: 55 failures of others on one address
        session.add_all(LoginFailure(key=f"address:{shared}", created_at=utcnow()) for _ in range(55))
    with TestClient(create_app(pg_backend.settings), client=(shared, 40000)) as victim:
        slowed = _login(victim, email)
        assert slowed.status_code == 429 and "your address" in slowed.json()["detail"]
        assert int(slowed.headers["retry-after"]) <= 30  # STREAMRL_LOGIN_ADDRESS_MAX_DELAY_S's default, not 895 s

    quick = pg_backend.settings.model_copy(update={
        "login_max_failures_per_address": 5, "login_base_delay_s": 0.25, "login_address_max_delay_s": 2})
    app, address = create_app(quick), f"10.56.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    with TestClient(app, client=(address, 40000)) as client:
        failures, refused, deadline = 0, 0, time.monotonic() + 60
        while failures < 9:  # other people's wrong passwords, each waiting out the address's growing delay
            assert time.monotonic() < deadline, (failures, refused)
            body = {"email": f"nobody-{uuid.uuid4().hex[:8]}@example.com", "password": "wrong-password"}
            answer = client.post(f"{API}/auth/login", json=body)
            failures, refused = failures + (answer.status_code == 401), refused + (answer.status_code == 429)
            time.sleep(0.0 if answer.status_code == 401 else 0.1)
        assert refused > 0  # guessing from the address is still slowed down
        first = _login(client, email)
        assert first.status_code == 429 and int(first.headers["retry-after"]) <= 2
        while (answer := _login(client, email)).status_code == 429:  # the owner's right password gets in
            assert time.monotonic() < deadline + 30
            time.sleep(0.2)
        assert answer.status_code == 200, answer.text


@contextmanager
def _server(settings: Any) -> Iterator[str]:
    """The API on a real uvicorn with the proxy options every launch of it uses (`streamrl up`, compose, k8s)."""
    with api_in_thread(settings, **uvicorn_proxy_options(settings)) as url:
        yield url


def _fail_from(url: str, forwarded_for: str) -> int:
    body = {"email": f"nobody-{uuid.uuid4().hex[:8]}@example.com", "password": "wrong-password"}
    return httpx.post(f"{url}{API}/auth/login", json=body, headers={"X-Forwarded-For": forwarded_for}).status_code


def test_forwarded_for_from_loopback_is_ignored_unless_the_proxy_is_configured(pg_backend: Any) -> None:
    with pg_backend.session() as session:
        from sqlalchemy import delete

        from backend.db.models import LoginFailure

        session.execute(delete(LoginFailure).where(LoginFailure.key.like("address:%")))
    limited = pg_backend.settings.model_copy(update={"login_max_failures_per_address": 3,
                                                     "login_base_delay_s": 300.0})  # the address waits 30 s
    with _server(limited) as url:  # no trusted proxies: each made-up address is still 127.0.0.1
        answers = [_fail_from(url, f"203.0.113.{n}") for n in range(4)]
        assert answers == [401, 401, 401, 429], answers
    with pg_backend.session() as session:
        session.execute(delete(LoginFailure).where(LoginFailure.key.like("address:%")))
    proxied = limited.model_copy(update={"trusted_proxies": "127.0.0.1"})
    with _server(proxied) as url:  # a configured proxy: the address it reports is the client's
        answers = [_fail_from(url, f"198.51.100.{n}") for n in range(4)]
        assert answers == [401, 401, 401, 401], answers
        assert [_fail_from(url, "198.51.100.9") for _ in range(4)][-1] == 429


def test_registration_answers_the_same_for_new_and_existing_emails(app_client: TestClient) -> None:
    email = f"r-{uuid.uuid4().hex[:8]}@example.com"
    first = app_client.post(f"{API}/auth/register", json={"email": email, "password": PASSWORD,
                                                           "team_name": f"t-{uuid.uuid4().hex[:8]}"})
    second_team = f"t-{uuid.uuid4().hex[:8]}"
    again = app_client.post(f"{API}/auth/register", json={"email": email.upper(), "password": "another-secret-42",
                                                           "team_name": second_team})
    assert first.status_code == again.status_code == 201, again.text
    assert first.json() == {**again.json(), "team_name": first.json()["team_name"]}
    assert "already" not in again.text
    assert _login(app_client, email, "another-secret-42").status_code == 401  # nothing of the account changed
    assert _login(app_client, email).status_code == 200
    other = f"r-{uuid.uuid4().hex[:8]}@example.com"  # the second team name was not taken by the repeat
    assert app_client.post(f"{API}/auth/register", json={"email": other, "password": PASSWORD,
                                                          "team_name": second_team}).status_code == 201
