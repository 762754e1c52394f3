"""More concurrent requests than the database pool has connections: every one is answered (AdmissionLimit). Without
the limit, requests holding a connection wait for a worker thread that requests waiting for a connection hold, until
the pool's timeout fails them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from backend.api.admission import AdmissionLimit, admission_slots, pool_capacity
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


async def _run_through(middleware: AdmissionLimit, paths: list[str]) -> tuple[list[str], int]:
    """Send one request per path (in list order, all at once) through `middleware`; the inner app records the order
    requests got in and the most that were inside at once."""
    entered: list[str] = []
    inside = peak = 0
    release = asyncio.Event()

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        nonlocal inside, peak
        entered.append(scope["path"])
        inside += 1
        peak = max(peak, inside)
        await release.wait()
        inside -= 1

    middleware.app = inner
    tasks = [asyncio.create_task(middleware({"type": "http", "path": path}, None, None)) for path in paths]
    for _ in range(5):
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*tasks)
    return entered, peak


def test_work_slots_bound_concurrency_and_admit_in_arrival_order() -> None:
    paths = [f"/api/v1/jobs/{i}" for i in range(20)]
    entered, peak = asyncio.run(_run_through(AdmissionLimit(None, limit=3), paths))  # type: ignore[arg-type]
    assert peak == 3
    assert entered == paths  # FIFO: nobody overtakes an earlier request


def test_uploads_do_not_take_work_slots() -> None:
    """Two slow uploads hold both upload slots; the other requests still get in (and uploads never exceed theirs)."""
    uploads = ["/api/v1/datasets"] * 3
    middleware = AdmissionLimit(None, limit=2, upload_limit=2, upload_paths=("/api/v1/datasets",))  # type: ignore[arg-type]

    async def scenario() -> tuple[list[str], int]:
        return await _run_through(middleware, uploads + ["/api/v1/jobs", "/api/v1/jobs/1"])

    entered, peak = asyncio.run(scenario())
    assert entered[:4] == ["/api/v1/datasets", "/api/v1/datasets", "/api/v1/jobs", "/api/v1/jobs/1"]
    assert peak == 4  # 2 uploads + 2 work slots, the third upload waits


def test_slots_never_exceed_the_pool() -> None:
    assert admission_slots(8, 30) == (8, 22)
    assert admission_slots(8, 5) == (5, 0)  # uploads share the work slots
    assert admission_slots(8, None) == (8, None)


def test_streams_hold_a_slot_for_their_setup_only() -> None:
    """An event stream takes a work slot until its headers go out (auth + snapshot), then gives it back: with one
    slot, a second stream's setup waits for the first one's, and a plain request gets in while both stream."""
    middleware = AdmissionLimit(None, limit=1)  # type: ignore[arg-type]
    order: list[str] = []
    setup_gate, streams_end = asyncio.Event(), asyncio.Event()

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        order.append(f"enter {scope['path']}")
        if scope["path"].endswith("/stream"):
            if scope["path"].startswith("/a"):
                await setup_gate.wait()  # the first stream's setup is slow
            await send({"type": "http.response.start", "status": 200, "headers": []})
            order.append(f"streaming {scope['path']}")
            await streams_end.wait()
        order.append(f"leave {scope['path']}")

    async def send(message: Any) -> None:
        pass

    async def scenario() -> None:
        middleware.app = inner
        first = asyncio.create_task(middleware({"type": "http", "path": "/a/stream"}, None, send))
        second = asyncio.create_task(middleware({"type": "http", "path": "/b/stream"}, None, send))
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["enter /a/stream"]  # the second stream's setup waits for the slot
        setup_gate.set()
        plain = asyncio.create_task(middleware({"type": "http", "path": "/jobs"}, None, send))
        await asyncio.wait_for(plain, 10)  # both streams open, the plain request got the slot
        assert order.index("leave /jobs") < len(order) and "leave /a/stream" not in order
        assert {"streaming /a/stream", "streaming /b/stream"} <= set(order)
        streams_end.set()
        await asyncio.gather(first, second)

    asyncio.run(scenario())
