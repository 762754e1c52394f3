"""The Alerts page in a browser: a webhook rule is created (its signing secret shown once), a bad URL is named under
its field, a test delivery is sent by a controller watch loop to a receiver that first answers 500, and the delivery
log shows both attempts and the success; the rule is disabled and deleted."""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

from backend.controller.watch import WatchLoop
from backend.db.session import make_engine
from contract.settings import Settings

pytestmark = pytest.mark.e2e
E2E_SECRET_KEY = "e2e-secret-key-0123456789"  # the e2e API server's (tests/e2e/conftest.py)


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A webhook receiver on 127.0.0.1: answers 500 to the first request, 200 after."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            got.append((dict(self.headers.items()), self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(500 if len(got) == 1 else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    server.shutdown()
    server.server_close()


def test_alert_rule_test_delivery_and_log(page: Page, api_server: Server, make_api: MakeApi, pg_url: str,
                                          redis_url: str, receiver: tuple[str, list[Any]], tmp_path: Any) -> None:
    url, got = receiver
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"alma-{tag}@example.com", PASSWORD, f"team-alerts-{tag}")
    open_signed_in(page, api_server, session["token"], "/alerts")

    form = page.get_by_test_id("rule-form")
    form.locator("input[name=name]").fill("oncall")
    form.locator("input[name=url]").fill("ftp://example.com/hook")
    form.get_by_role("button", name="Create rule").click()
    expect(form.locator(".field-error")).to_contain_text("http")  # named under the URL field
    form.locator("input[name=url]").fill(url)
    form.locator("input[name=event-job_stalled]").check()
    form.get_by_role("button", name="Create rule").click()
    secret = page.get_by_test_id("new-rule-secret").locator("code.secret")
    expect(secret).to_have_text(re.compile(r"^whsec_"))
    signing_secret = secret.inner_text()
    rules = page.get_by_test_id("alert-rules")
    expect(rules.locator("tbody tr")).to_have_count(1)
    expect(rules).to_contain_text("job_failed, job_stalled")
    expect(rules).to_contain_text("secret set")
    page.get_by_test_id("new-rule-secret").get_by_role("button", name="done").click()

    settings = Settings(database_url=pg_url, redis_url=redis_url, data_dir=tmp_path, secret_key=E2E_SECRET_KEY,
                        alert_retry_base_s=0.5, egress_allow="127.0.0.1")
    engine = make_engine(pg_url)
    watch = WatchLoop(settings, redis.Redis.from_url(redis_url), engine, interval_s=0.2).start()
    try:
        rules.get_by_role("button", name="test").click()
        log = page.get_by_test_id("delivery-log")
        expect(log.locator("tbody tr")).to_have_count(1)
        expect(log.locator("tbody tr").first).to_contain_text("succeeded", timeout=60_000)
        expect(log).to_contain_text("HTTP 500")
        expect(log).to_contain_text("HTTP 200")
        shot(page, "60-alerts")
    finally:
        watch.stop()
        engine.dispose()
    assert len(got) == 2
    headers, body = got[-1]
    expected = "sha256=" + hmac.new(signing_secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-StreamRL-Signature"], expected)

    expect(page.get_by_test_id("rule-form").locator("input[name=name]")).to_have_value("")  # emptied after the save
    rules.get_by_role("button", name="disable").click()
    expect(rules).to_contain_text("disabled")
    rules.get_by_role("button", name="delete").click()
    expect(rules.locator("tbody tr")).to_have_count(0)


def test_tracker_connections_on_the_team_page(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"tove-{tag}@example.com", PASSWORD, f"team-trackers-{tag}")
    open_signed_in(page, api_server, session["token"], "/team")
    mlflow = page.get_by_test_id("tracker-mlflow")
    expect(mlflow).to_contain_text("not connected")
    mlflow.locator("input[name=tracking_uri]").fill("not a url")
    mlflow.get_by_role("button", name="Save mlflow").click()
    expect(mlflow.locator(".field-error")).to_contain_text("http")  # named under its field
    mlflow.locator("input[name=tracking_uri]").fill("http://mlflow.internal:5000")
    mlflow.locator("input[name=token]").fill("tok-never-shown-again")
    mlflow.get_by_role("button", name="Save mlflow").click()
    expect(mlflow).to_contain_text("saved")
    expect(mlflow).to_contain_text("set (leave empty to keep it)")
    expect(mlflow.locator("input[name=token]")).to_have_value("")  # write-only: never filled back in
    page.reload()
    expect(page.get_by_test_id("tracker-mlflow").locator("input[name=tracking_uri]")).to_have_value(
        "http://mlflow.internal:5000")
    assert "tok-never-shown-again" not in page.content()
    assert "tok-never-shown-again" not in api.http.get("/trackers", headers={
        "Authorization": f"Bearer {session['token']}"}).text
    shot(page, "61-trackers")
    moved = page.get_by_test_id("tracker-mlflow")  # a new URL: the stored token will not follow it
    moved.locator("input[name=tracking_uri]").fill("https://mlflow.example.com")
    expect(moved).to_contain_text("forgotten on save: the server URL changed")
    moved.get_by_role("button", name="Save mlflow").click()
    expect(moved).not_to_contain_text("forgotten on save")  # saved and reloaded
    expect(moved).not_to_contain_text("leave empty to keep it")
    assert api.http.get("/trackers", headers={"Authorization": f"Bearer {session['token']}"}).json()["data"][0][
        "secrets"] == {"token": False, "password": False}


def test_submit_form_names_trackers(page: Page, api_server: Server, make_api: MakeApi) -> None:
    """W&B online without the team's API key comes back as a 422 under the tracker picker; TensorBoard plus W&B
    offline are submitted as telemetry.trackers."""
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"ture-{tag}@example.com", PASSWORD, f"team-tracked-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    open_signed_in(page, api_server, session["token"], "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny-1m")
    page.locator("select[name=dataset_source]").select_option("builtin")
    picker = page.get_by_test_id("tracker-picker")
    picker.locator("input[name=tracker-wandb]").check()
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".field-error").filter(has_text="API key")).to_be_visible()
    picker.locator("select[name=wandb-mode]").select_option("offline")
    picker.locator("input[name=tracker-tensorboard]").check()
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    spec = api.get(f"/jobs/{job_id}")["spec"]
    assert spec["telemetry"]["trackers"] == [
        {"type": "wandb", "mode": "offline", "experiment": None, "project": None, "run_name": None},
        {"type": "tensorboard", "mode": None, "experiment": None, "project": None, "run_name": None}]
    assert [r["tracker"] for r in api.get(f"/jobs/{job_id}/trackers")["data"]] == ["wandb", "tensorboard"]
    api.post(f"/jobs/{job_id}/cancel")
