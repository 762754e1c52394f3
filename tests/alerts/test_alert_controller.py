"""Off the request path and across restarts: a real `streamrl controller` fails a job no training worker picks up,
and its watch loop posts the `job_failed` webhook; the controller is killed (SIGKILL) while that first request is in
flight, and a new controller sends the delivery again, because the pending row outlives the process."""

from __future__ import annotations

import hashlib
import hmac
import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from alert_servers import WebhookReceiver
from sqlalchemy import select
from waiting import environ_snapshot, wait_until

from backend.db.enums import TERMINAL_JOB_STATUSES, JobStatus, Role
from backend.db.models import AlertDelivery, Job, Model

pytestmark = [pytest.mark.integration]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def controller_env(pg_backend: Any, redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    with pg_backend.session() as session:  # the database is shared with earlier modules: their jobs are not ours
        for job in session.scalars(select(Job).where(Job.status.not_in(TERMINAL_JOB_STATUSES))):
            job.status = JobStatus.cancelled
    yield {**environ_snapshot(), "PYTHONPATH": str(REPO), "STREAMRL_DATABASE_URL": pg_backend.url,
           "STREAMRL_REDIS_URL": redis_url, "STREAMRL_SECRET_KEY": pg_backend.settings.secret_key,
           "STREAMRL_DATA_DIR": str(tmp_path), "STREAMRL_AUTO_MIGRATE": "false",
           "STREAMRL_DRIVER_START_TIMEOUT_S": "3", "STREAMRL_ALERT_TIMEOUT_S": "2", "STREAMRL_ALERT_RETRY_BASE_S": "1",
           "STREAMRL_EGRESS_ALLOW": "127.0.0.1"}  # the test's webhook receiver
    redis.Redis.from_url(redis_url).delete("training")  # the driver task no worker took: not for later modules


def _controller(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "streamrl.cli.main", "controller", "--interval", "0.5"],
                            cwd=REPO, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_delivery_survives_a_controller_killed_mid_send(pg_backend: Any, controller_env: dict[str, str],
                                                        webhook_receiver: WebhookReceiver, tmp_path: Path) -> None:
    team = pg_backend.make_team()
    admin = pg_backend.auth_headers(pg_backend.make_user(team, Role.admin), team)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pg_backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(model_dir)))
    webhook_receiver.hold_first = threading.Event()
    with pg_backend.client(egress_allow="127.0.0.1") as client:
        rule = client.post("/api/v1/alerts/rules", headers=admin, json={
            "name": "failures", "events": ["job_failed"], "channel": "webhook", "url": webhook_receiver.url})
        assert rule.status_code == 201, rule.text
        secret = rule.json()["secret"]
        job = client.post("/api/v1/jobs", headers=admin, json={
            "name": f"no-worker-{uuid.uuid4().hex[:6]}", "model": "tiny",
            "dataset": {"builtin": "arithmetic", "num_prompts": 8}})
        assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    log = tmp_path / "controller.log"

    first = _controller(controller_env, log)
    try:
        wait_until(lambda: webhook_receiver.requests, 90, f"the first webhook request ({log.read_text()[-2000:]})")
    finally:
        _kill(first)  # mid-request: the attempt is never recorded
    webhook_receiver.hold_first.set()
    with pg_backend.session() as session:
        [pending] = session.scalars(select(AlertDelivery).where(AlertDelivery.rule_id == rule.json()["id"])).all()
        assert pending.state == "pending" and pending.attempts == 0 and pending.job_id == job_id

    second = _controller(controller_env, log)
    try:
        def sent() -> AlertDelivery | None:
            with pg_backend.session() as session:
                row = session.get(AlertDelivery, pending.id)
                return row if row is not None and row.state == "succeeded" else None

        delivered = wait_until(sent, 90, f"the delivery after the restart ({log.read_text()[-2000:]})")
    finally:
        _kill(second)
    assert delivered.attempts == 1 and delivered.last_status_code == 200
    assert len(webhook_receiver.requests) == 2
    for request in webhook_receiver.requests:
        body = request.json()
        assert body["event"] == "job_failed" and body["job"]["id"] == job_id
        assert "no training worker" in body["message"]
        expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(request.headers["x-streamrl-signature"], expected)
