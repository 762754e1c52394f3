"""Tracker connections under the egress policy (issue 36, finding 5): a connection may not point at the platform's
own network unless the operator allows it (422 naming the field); changing the server URL drops the stored
credentials not given again with it, so a team admin cannot send the stored MLflow user, password or token to a host
of their choosing; and a connection stored before the policy is refused again when the controller connects."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from waiting import free_port

from backend.db.enums import JobStatus, Role
from backend.db.models import Job, Model, TrackerRun
from backend.services.job_data import record_iteration
from backend.trackers.sync import OpenSinks, sync_trackers

API = "/api/v1/trackers"


@dataclass
class Capture:
    url: str
    requests: list[dict[str, str]] = field(default_factory=list)  # each request's headers


@pytest.fixture
def capture() -> Iterator[Capture]:
    """An HTTP server that records each request's headers and answers 500 (it is not a tracker)."""
    port = free_port()
    seen = Capture(url=f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            seen.requests.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PUT = _record  # noqa: N815 - http.server's names

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield seen
    server.shutdown()
    server.server_close()


def _admin(backend: Any, tmp_path: Path) -> dict[str, str]:
    team = backend.make_team()
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(model_dir)))
    return backend.auth_headers(backend.make_user(team, Role.admin), team)


def _mlflow_job(client: Any, headers: dict[str, str]) -> int:
    spec = {"name": "tracked", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            "telemetry": {"trackers": [{"type": "mlflow"}]}}
    answer = client.post("/api/v1/jobs", json=spec, headers=headers)
    assert answer.status_code == 201, answer.text
    with client.app.state.session_factory() as session:
        session.get(Job, answer.json()["id"]).status = JobStatus.running
        record_iteration(session=session, job_id=answer.json()["id"], iteration=1, metrics={"loss": 1.0})
        session.commit()
    return int(answer.json()["id"])


def _run(backend: Any, job_id: int) -> TrackerRun:
    with backend.session() as session:
        run = session.scalar(select(TrackerRun).where(TrackerRun.job_id == job_id))
        assert run is not None
        session.expunge(run)
        return run


@pytest.mark.parametrize(("kind", "body", "field_name"), [
    ("mlflow", {"tracking_uri": "http://127.0.0.1:5000"}, "tracking_uri"),
    ("mlflow", {"tracking_uri": "http://localhost:5000"}, "tracking_uri"),
    ("mlflow", {"tracking_uri": "http://2130706433:5000"}, "tracking_uri"),
    ("mlflow", {"tracking_uri": "http://user:pw@mlflow.example.com"}, "tracking_uri"),
    ("mlflow", {"tracking_uri": "http://mlflow.example.com/\r\nHost: x"}, "tracking_uri"),
    ("wandb", {"base_url": "http://169.254.169.254"}, "base_url"),
    ("wandb", {"base_url": "http://[::ffff:10.0.0.1]"}, "base_url"),
])
def test_internal_tracker_urls_are_refused_at_save(pg_backend: Any, tmp_path: Path, kind: str, body: dict[str, str],
                                                   field_name: str) -> None:
    headers = _admin(pg_backend, tmp_path)
    with pg_backend.client() as client:
        refused = client.put(f"{API}/{kind}", json=body, headers=headers)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"][-1] == field_name, refused.text
        assert client.get(API, headers=headers).json()["count"] == 0  # nothing half-written


def test_a_new_url_drops_the_stored_credentials(pg_backend: Any, tmp_path: Path) -> None:
    headers = _admin(pg_backend, tmp_path)
    with pg_backend.client() as client:
        first = client.put(f"{API}/mlflow", headers=headers, json={
            "tracking_uri": "https://mlflow.example.com", "username": "alice", "password": "pw", "token": "tok"})
        assert first.status_code == 200 and first.json()["secrets"] == {"token": True, "password": True}
        same = client.put(f"{API}/mlflow", headers=headers, json={"tracking_uri": "https://mlflow.example.com"})
        assert same.json()["secrets"] == {"token": True, "password": True} and same.json()["username"] == "alice"
        moved = client.put(f"{API}/mlflow", headers=headers, json={"tracking_uri": "https://other.example.com"})
        assert moved.status_code == 200 and moved.json()["secrets"] == {"token": False, "password": False}
        assert moved.json()["username"] is None
        given = client.put(f"{API}/mlflow", headers=headers, json={
            "tracking_uri": "https://third.example.com", "username": "bob", "password": "pw2"})
        assert given.json()["secrets"] == {"token": False, "password": True} and given.json()["username"] == "bob"
        key = client.put(f"{API}/wandb", headers=headers, json={"api_key": "k" * 40})
        assert key.json()["secrets"] == {"api_key": True}
        self_hosted = client.put(f"{API}/wandb", headers=headers, json={"base_url": "https://wandb.example.com"})
        assert self_hosted.json()["secrets"] == {"api_key": False}


def test_stored_credentials_never_reach_a_new_host(pg_backend: Any, tmp_path: Path, capture: Capture) -> None:
    """The harvest: an admin swaps only `tracking_uri` to a server they run; the controller's requests to it carry
    no stored user, password or token."""
    headers = _admin(pg_backend, tmp_path)
    with pg_backend.client(egress_allow="127.0.0.1") as client:
        assert client.put(f"{API}/mlflow", headers=headers, json={
            "tracking_uri": "https://mlflow.example.com", "username": "alice", "password": "pw",
            "token": "tok"}).status_code == 200
        job_id = _mlflow_job(client, headers)
        assert client.put(f"{API}/mlflow", headers=headers, json={"tracking_uri": capture.url}).status_code == 200
    sync_trackers(pg_backend.settings.model_copy(update={"egress_allow": "127.0.0.1"}), OpenSinks(),
                  pg_backend.engine)
    assert capture.requests, "the controller did not reach the tracker"
    assert all("authorization" not in request for request in capture.requests), capture.requests
    with pg_backend.session() as session:
        session.get(Job, job_id).status = JobStatus.cancelled


def test_a_stored_internal_url_is_refused_when_the_controller_connects(pg_backend: Any, tmp_path: Path,
                                                                        capture: Capture) -> None:
    headers = _admin(pg_backend, tmp_path)
    with pg_backend.client(egress_allow="127.0.0.1") as client:  # saved while the operator allowed it
        assert client.put(f"{API}/mlflow", headers=headers, json={"tracking_uri": capture.url}).status_code == 200
        job_id = _mlflow_job(client, headers)
    sync_trackers(pg_backend.settings, OpenSinks(), pg_backend.engine)  # the default policy now
    run = _run(pg_backend, job_id)
    assert run.down_since is not None and "refused by the egress policy" in (run.last_error or ""), run.last_error
    assert capture.requests == []
    with pg_backend.session() as session:
        session.get(Job, job_id).status = JobStatus.cancelled
