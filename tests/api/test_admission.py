"""More concurrent requests than the database pool has connections: every one is answered (AdmissionLimit). Without
the limit, requests holding a connection wait for a worker thread that requests waiting for a connection hold, until
the pool's timeout fails them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from backend.api.admission import AdmissionLimit, pool_capacity
from backend.db.session import make_engine
from backend.main import create_app

API = "/api/v1"


def test_requests_beyond_the_pool_wait_for_a_slot_instead_of_failing(pg_backend: Any, register_model: Any) -> None:
    team = pg_backend.make_team()
    user = pg_backend.make_user(team=team)
    headers = pg_backend.auth_headers(user, team)
    engine = make_engine(pg_backend.url, pool_size=1, max_overflow=1, pool_timeout=3)
    assert pool_capacity(engine) == 2
    app = create_app(pg_backend.settings, engine=engine)
    assert any(m.cls is AdmissionLimit and m.kwargs["limit"] == 2 for m in app.user_middleware)

    async def burst() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            answers = await asyncio.gather(*(client.get(f"{API}/jobs", headers=headers) for _ in range(60)))
        return [answer.status_code for answer in answers]

    try:
        assert asyncio.run(burst()) == [200] * 60
    finally:
        engine.dispose()
