"""The API's auth cache (backend/api/auth_cache.py): reads skip the membership query, and every change that goes
through any API process still takes effect at once; changes made behind the API's back are bounded by the TTL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import delete, event

from backend.db.models import Membership
from backend.main import create_app

API = "/api/v1"


@contextmanager
def api(backend: Any, live_within_s: float = 60, **overrides: Any) -> Iterator[TestClient]:
    """An API process of its own (own engine, cache and subscription), waiting (up to `live_within_s`) until its
    cache is live."""
    settings = backend.settings.model_copy(update=overrides)
    with TestClient(create_app(settings)) as client:
        cache = client.app.state.auth_cache  # type: ignore[attr-defined]
        deadline = time.monotonic() + live_within_s
        while settings.auth_cache_s > 0 and settings.redis_url and not cache.live and time.monotonic() < deadline:
            time.sleep(0.02)
        yield client


@contextmanager
def membership_reads(client: TestClient) -> Iterator[list[str]]:
    """The SQL statements that read memberships, as `client`'s app sends them."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FROM memberships" in statement:
            seen.append(statement)

    engine = client.app.state.engine  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def eventually(check: Any, seconds: float = 60.0) -> float:
    """Seconds until `check()` held (fails after `seconds`: generous, a loaded machine delivers messages late)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "the change did not take effect in time"
        time.sleep(0.01)
    return time.monotonic() - started


def test_repeated_reads_skip_the_membership_query(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    headers = pg_backend.auth_headers(pg_backend.make_user(team=team), team)
    with api(pg_backend) as client, membership_reads(client) as reads:
        assert client.app.state.auth_cache.live  # type: ignore[attr-defined]
        for _ in range(5):
            assert client.get(f"{API}/jobs", headers=headers).status_code == 200
        assert len(reads) == 1
        assert client.get(f"{API}/teams/current", headers=headers).json()["id"] == team.id  # merged objects load


def test_writes_always_read_the_database(pg_backend: Any, job_spec: Any, register_model: Any) -> None:
    team = pg_backend.make_team()
    register_model(pg_backend, team)
    headers = pg_backend.auth_headers(pg_backend.make_user(team=team), team)
    with api(pg_backend) as client, membership_reads(client) as reads:
        client.get(f"{API}/jobs", headers=headers)
        for _ in range(2):
            assert client.post(f"{API}/jobs", json=job_spec(), headers=headers).status_code == 201
        assert len(reads) >= 3


def test_logout_in_another_process_ends_cached_sessions_at_once(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    headers = pg_backend.auth_headers(pg_backend.make_user(team=team), team)
    with api(pg_backend) as reader, api(pg_backend) as writer:
        assert reader.get(f"{API}/jobs", headers=headers).status_code == 200  # cached in the reader
        assert writer.post(f"{API}/auth/logout", headers=headers).status_code == 204
        delay = eventually(lambda: reader.get(f"{API}/jobs", headers=headers).status_code == 401)
        assert delay < 1.0


def test_member_removed_in_this_process_is_refused_on_the_next_read(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    admin = pg_backend.make_user(team=team, role="admin")
    member = pg_backend.make_user(team=team)
    member_headers = pg_backend.auth_headers(member, team)
    with api(pg_backend) as client:
        assert client.get(f"{API}/jobs", headers=member_headers).status_code == 200
        removed = client.delete(
            f"{API}/teams/current/members/{member.id}", headers=pg_backend.auth_headers(admin, team)
        )
        assert removed.status_code == 204
        assert client.get(f"{API}/jobs", headers=member_headers).status_code == 401  # no waiting at all


def test_quota_change_shows_on_the_next_read(pg_backend: Any) -> None:
    team = pg_backend.make_team(max_concurrent_jobs=2)
    headers = pg_backend.auth_headers(pg_backend.make_user(team=team, role="admin"), team)
    with api(pg_backend) as reader, api(pg_backend) as writer:
        assert reader.get(f"{API}/teams/current", headers=headers).json()["quotas"]["max_concurrent_jobs"] == 2
        assert (
            writer.patch(f"{API}/teams/current/quotas", json={"max_concurrent_jobs": 5}, headers=headers).status_code
            == 200
        )
        eventually(
            lambda: reader.get(f"{API}/teams/current", headers=headers).json()["quotas"]["max_concurrent_jobs"] == 5
        )


def test_a_change_behind_the_apis_back_is_bounded_by_the_ttl(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    user = pg_backend.make_user(team=team)
    headers = pg_backend.auth_headers(user, team)
    with api(pg_backend, auth_cache_s=0.5) as client:
        assert client.get(f"{API}/jobs", headers=headers).status_code == 200
        with pg_backend.session() as session:  # direct SQL: no API process hears of it
            session.execute(delete(Membership).where(Membership.user_id == user.id))
        assert client.get(f"{API}/jobs", headers=headers).status_code == 200  # still cached: the documented bound
        eventually(lambda: client.get(f"{API}/jobs", headers=headers).status_code == 401)


def test_nothing_is_cached_without_redis_or_with_ttl_zero(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    headers = pg_backend.auth_headers(pg_backend.make_user(team=team), team)
    for overrides in ({"redis_url": "redis://127.0.0.1:1/0"}, {"auth_cache_s": 0}):
        # no wait for a cache that cannot go live (Redis unreachable): 0.3 s is ample for one that could (ms)
        with api(pg_backend, live_within_s=0, **overrides) as client, membership_reads(client) as reads:
            time.sleep(0.3)
            for _ in range(3):
                assert client.get(f"{API}/jobs", headers=headers).status_code == 200
            assert not client.app.state.auth_cache.live  # type: ignore[attr-defined]
            assert len(reads) == 3
