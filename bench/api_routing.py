"""API request overhead on the event loop: the app as built (every route in one router) against the same routes
nested two levels deep with `include_router` (how the app was built before), measured in one process in alternating
batches so both see the same machine load.

Each request is a GET of `/api/v1/jobs/1/iterations` without credentials (answered 401 by the auth dependency): it
runs the middlewares, route matching and dependency resolution but no database query, which is the per-request
work every route pays on the event loop before its handler runs in a thread.

Run: `python bench/api_routing.py [--requests 300] [--rounds 5]`.
Final line: `RESULT flat_ms=... nested_ms=... nested_over_flat=...` (median per-request milliseconds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi import APIRouter  # noqa: E402

import backend.main as main  # noqa: E402
from contract.settings import Settings  # noqa: E402


def nested_router(disabled: list[str] | tuple[str, ...] = ()) -> APIRouter:
    """The routes as the app used to mount them: the resource routers included in a router that the app includes
    (under /api/v1, as `create_app` does), two levels of included routers."""
    router = APIRouter()
    for module in (*main.ROUTERS, *(m for name, m in main.OPTIONAL_ROUTERS.items() if name not in disabled)):
        router.include_router(module.router)
    return router


def build(settings: Settings, nested: bool) -> Any:
    original = main.api_router
    if nested:
        main.api_router = nested_router
    try:
        app = main.create_app(settings)
    finally:
        main.api_router = original
    return app


async def call(app: Any, path: str) -> None:
    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"bench")], "scheme": "http", "server": ("bench", 80), "client": ("127.0.0.1", 1),
             "root_path": "", "http_version": "1.1", "app": app, "state": {}}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] in (401, 404), message

    await app(scope, receive, send)


async def batch(app: Any, requests: int) -> float:
    started = time.perf_counter()
    for _ in range(requests):
        await call(app, "/api/v1/jobs/1/iterations")
    return 1000 * (time.perf_counter() - started) / requests


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamrl-bench-") as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/bench.db", data_dir=Path(tmp), redis_url=None,
                            secret_key="bench-secret-key-0123456789abcdef", auto_migrate=False)
        apps = {"flat": build(settings, nested=False), "nested": build(settings, nested=True)}
        times: dict[str, list[float]] = {name: [] for name in apps}
        for app in apps.values():
            asyncio.run(batch(app, 50))  # warm up: routes resolved, caches filled
        for _ in range(args.rounds):
            for name, app in apps.items():
                times[name].append(asyncio.run(batch(app, args.requests)))
        for name, values in times.items():
            print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} ms per request", flush=True)
    flat, nested = statistics.median(times["flat"]), statistics.median(times["nested"])
    print(f"RESULT flat_ms={flat:.2f} nested_ms={nested:.2f} nested_over_flat={nested / flat:.2f}")


if __name__ == "__main__":
    main_()
