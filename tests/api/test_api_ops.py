"""Health, readiness (with and without Redis), Prometheus metrics, OpenAPI, and live events over SSE."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from backend.main import create_app
from backend.services.live import live_channel, publish_live
from contract import keys

API = "/api/v1"


METRICS_TOKEN = "scrape-token-0123456789"


def test_health_ready_metrics_and_docs(pg_backend: Any, world: Any) -> None:
    with pg_backend.client(metrics_token=METRICS_TOKEN) as client:
        assert client.get(f"{API}/health").json() == {"status": "ok"}
        assert client.get(f"{API}/ready").json() == {"database": "ok", "redis": "ok"}
        world.submit(client)
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert metrics.status_code == 200
        families = {family.name: family for family in text_string_to_metric_families(metrics.text)}  # as scraped
        jobs = {sample.labels["status"]: sample.value for sample in families["streamrl_jobs"].samples}
        assert jobs["queued"] >= 1
        assert 'streamrl_generation_instances{status="running"}' in metrics.text
        assert 'streamrl_http_requests_total{method="POST",route="/api/v1/jobs",status="201"} 1.0' in metrics.text
        schema = client.get("/openapi.json").json()
        assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/scale", "/api/v1/datasets"} <= set(schema["paths"])
        assert client.get("/docs").status_code == 200


def test_metrics_need_the_metrics_token(pg_backend: Any, world: Any) -> None:
    """Job counts span every team: no login, a team's session or a wrong token reads nothing."""
    with pg_backend.client() as client:  # no token configured: /metrics is off
        off = client.get("/metrics")
        assert off.status_code == 404 and "STREAMRL_METRICS_TOKEN" in off.json()["detail"]
    with pg_backend.client(metrics_token=METRICS_TOKEN) as client:
        for headers in ({}, world.headers("owner"), {"Authorization": "Bearer wrong-token"},
                        {"Authorization": f"Basic {METRICS_TOKEN}"}):
            refused = client.get("/metrics", headers=headers)
            assert refused.status_code == 401 and "streamrl_jobs" not in refused.text, headers
            assert refused.headers["www-authenticate"].startswith("Bearer")


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
    subscriber = redis.Redis.from_url(redis_url).pubsub()
    subscriber.subscribe(live_channel(job["id"]))
    deadline = time.monotonic() + 60
    while (confirmed := subscriber.get_message(timeout=0.5)) is None or confirmed["type"] != "subscribe":
        assert time.monotonic() < deadline, "the subscription was not confirmed"  # published before it: lost
    app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=world.headers("member"))
    received: list[dict[str, Any]] = []
    while len(received) < 2 and time.monotonic() < deadline:
        message = subscriber.get_message(timeout=0.5)
        if message and message["type"] == "message":
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
        assert "STREAMRL_METRICS_TOKEN" in client.get("/metrics").json()["detail"]  # the metrics route, not the SPA


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
