"""`streamrl alerts` against a real API server: create (secret shown once), list (never the secret), update, test
with --wait while a controller watch loop sends deliveries, the delivery log with the error, delete; e-mail refused
when the platform has no SMTP server, with the reason."""

from __future__ import annotations

import json

import pytest
import redis

from backend.controller.watch import WatchLoop
from backend.db.session import make_engine
from contract.settings import Settings

from .conftest import Invoke, Server

pytestmark = pytest.mark.integration


def test_alert_rules_from_the_cli(cli: Invoke, owner: str, api_server: Server) -> None:
    created = cli("alerts", "create", "oncall", "--event", "job_failed", "--event", "job_stalled",
                  "--webhook", "http://127.0.0.1:9/unreachable")
    assert created.exit_code == 0, created.stderr
    assert "signing secret (shown once" in created.stdout and "X-StreamRL-Signature" in created.stdout
    secret = created.stdout.split("store it now): ")[1].split()[0]
    rule = json.loads(cli("--json", "alerts", "list").stdout)["data"][0]
    assert rule["name"] == "oncall" and rule["secret_set"] is True
    assert secret not in cli("alerts", "list").stdout

    bad = cli("alerts", "create", "x", "--event", "job_exploded", "--webhook", "http://example.com/h")
    assert bad.exit_code == 1 and "events" in bad.stderr
    mail = cli("alerts", "create", "mail", "--event", "job_failed", "--email", "ml@example.com")
    assert mail.exit_code == 1 and "STREAMRL_SMTP_HOST" in mail.stderr

    updated = cli("alerts", "update", str(rule["id"]), "--event", "training_signal", "--disable")
    assert updated.exit_code == 0 and "training_signal" in updated.stdout and "False" in updated.stdout

    # the server's data dir: the same secret_key, so the watch loop can read the rule's signing secret
    settings = Settings(database_url=api_server.database_url, redis_url=api_server.redis_url,
                        data_dir=api_server.data_dir, alert_max_attempts=1, egress_allow="127.0.0.1")
    engine = make_engine(api_server.database_url)
    watch = WatchLoop(settings, redis.Redis.from_url(api_server.redis_url), engine, interval_s=0.2).start()
    try:
        tested = cli("alerts", "test", str(rule["id"]), "--wait", "--timeout", "60")
    finally:
        watch.stop()
        engine.dispose()
    assert tested.exit_code == 1 and "is failed" in tested.stderr, tested.stderr
    assert "ConnectError" in tested.stdout
    log = cli("alerts", "log", str(rule["id"]))
    assert "test" in log.stdout and "failed" in log.stdout and "ConnectError" in log.stdout

    assert cli("alerts", "delete", str(rule["id"])).exit_code == 0
    gone = cli("alerts", "log", str(rule["id"]))
    assert gone.exit_code == 1 and gone.stderr.startswith("error: 404")


def test_tracker_connections_from_the_cli(cli: Invoke, owner: str, api_server: Server) -> None:
    saved = cli("trackers", "set", "mlflow", "--tracking-uri", "http://127.0.0.1:5000", "--token", "tok-never-shown")
    assert saved.exit_code == 0, saved.stderr
    assert "token set" in saved.stdout and "tok-never-shown" not in saved.stdout
    listed = cli("trackers", "list")
    assert "http://127.0.0.1:5000" in listed.stdout and "token: set" in listed.stdout
    assert "tok-never-shown" not in listed.stdout and "tok-never-shown" not in cli("--json", "trackers", "list").stdout
    wrong = cli("trackers", "set", "wandb", "--tracking-uri", "http://x")
    assert wrong.exit_code == 1 and "tracking_uri" in wrong.stderr
    assert cli("trackers", "set", "tensorboard").exit_code == 1
    assert cli("trackers", "delete", "mlflow").exit_code == 0
    assert "(none)" in cli("trackers", "list").stdout
