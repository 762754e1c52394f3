"""Health, readiness (with and without Redis), Prometheus metrics, OpenAPI, and live events over SSE."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import redis
from fastapi.testclient import TestClient

from backend.main import create_app
from backend.services.live import live_channel, publish_live
from contract import keys

API = "/api/v1"


def test_health_ready_metrics_and_docs(app_client: TestClient, world: Any) -> None:
    assert app_client.get(f"{API}/health").json() == {"status": "ok"}
    assert app_client.get(f"{API}/ready").json() == {"database": "ok", "redis": "ok"}
    world.submit(app_client)
    metrics = app_client.get("/metrics")
    assert metrics.status_code == 200
    assert 'streamrl_jobs{status="queued"}' in metrics.text
    assert 'streamrl_generation_instances{status="running"}' in metrics.text

    assert 'streamrl_http_requests_total{method="POST",route="/api/v1/jobs",status="201"} 1.0' in metrics.text
    schema = app_client.get("/openapi.json").json()
    assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/scale", "/api/v1/datasets"} <= set(schema["paths"])
    assert app_client.get("/docs").status_code == 200


def test_without_redis_the_api_serves_and_reports_it(pg_backend: Any, world: Any) -> None:
    with pg_backend.client(redis_url="redis://127.0.0.1:1/0") as client:
        ready = client.get(f"{API}/ready")
        assert ready.status_code == 503 and ready.json()["database"] == "ok"
        assert ready.json()["redis"].startswith("error:")
        job = world.submit(client)  # live publishing is best effort
        stream = client.get(f"{API}/jobs/{job['id']}/stream", headers=world.headers("viewer"))
        assert stream.status_code == 503 and "Redis is not available" in stream.json()["detail"]


def test_job_actions_publish_status_and_events(app_client: TestClient, world: Any, redis_url: str) -> None:
    job = world.submit(app_client)
    subscriber = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    subscriber.subscribe(live_channel(job["id"]))
    subscriber.get_message(timeout=1)
    app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=world.headers("member"))
    received: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
    while len(received) < 2 and time.monotonic() < deadline:
        message = subscriber.get_message(timeout=0.5)
        if message:
            received.append(json.loads(message["data"]))
    subscriber.close()
    assert [m["type"] for m in received] == ["status", "event"]
    assert received[0]["data"]["status"] == "cancelled" and received[1]["data"]["message"] == "queued -> cancelled"


def test_sse_stream_sends_snapshot_then_live_events_and_ends_on_terminal_status(
    live_server: str, app_client: TestClient, world: Any, redis_url: str
) -> None:
    job = world.submit(app_client)
    publisher = redis.Redis.from_url(redis_url)
    events: list[tuple[str | None, Any]] = []
    url = f"{live_server}{API}/jobs/{job['id']}/stream"
    with httpx.stream("GET", url, headers=world.headers("viewer"), timeout=10) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
                if len(events) == 1:  # snapshot received: the subscription is live
                    publish_live(publisher, job["id"], "metrics", {"iteration": 1, "reward_mean": 0.25})
                    app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=world.headers("member"))
    publisher.close()
    assert [k for k, _ in events] == ["status", "metrics", "status", "event"][: len(events)]
    assert events[0][1]["status"] == "queued" and events[1][1]["reward_mean"] == 0.25
    assert events[2][1]["status"] == "cancelled"  # terminal: the server closed the stream


def test_built_dashboard_is_served_with_spa_fallback(pg_backend: Any, tmp_path: Any) -> None:
    from backend.api.static import install_frontend

    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<div id=root></div>")
    (tmp_path / "assets" / "app.js").write_text("console.log(1)")
    app = create_app(pg_backend.settings)
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", "") != "/{path:path}"]
    assert install_frontend(app, dist=tmp_path)
    with TestClient(app) as client:
        assert client.get("/").text == "<div id=root></div>"
        assert client.get("/jobs/42").text == "<div id=root></div>"  # client-side route
        assert client.get("/assets/app.js").text == "console.log(1)"
        assert client.get("/api/v1/nope").status_code == 404
        assert client.get("/api/v1/health").json() == {"status": "ok"}
        assert client.get("/metrics").status_code == 200


def test_job_changes_wake_the_controller(app_client: TestClient, world: Any, redis_url: str) -> None:
    """Every job change pushes one wake-up the controller's loop blocks on (so an idle controller need not poll)."""
    client = redis.Redis.from_url(redis_url)
    client.delete(keys.controller_wake())
    job = world.submit(app_client)
    assert client.lrange(keys.controller_wake(), 0, -1) == [b"1"]
    assert 0 < client.ttl(keys.controller_wake()) <= 3600
    client.delete(keys.controller_wake())
    app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=world.headers("member"))
    assert client.llen(keys.controller_wake()) == 1
