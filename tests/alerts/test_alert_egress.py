"""Webhooks under the egress policy (issue 36, finding 4): by default a rule may not point at the platform's own
network (loopback, unspecified, private, link-local, decimal/octal/IPv6-mapped forms, user-info and CRLF tricks): 422
naming `url`, at create and at update. A rule stored before (or a name whose DNS answer changed) is refused again at
send, before any byte leaves. The operator's allow-list (STREAMRL_EGRESS_ALLOW) lets a named address through. A
failed delivery's log keeps the status code, never the receiver's answer; viewers and members see webhook URLs
masked (scheme and host only)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from alert_servers import WebhookReceiver
from sqlalchemy import select
from waiting import wait_until

from backend.db.enums import JobStatus, Role
from backend.db.models import AlertDelivery, AlertRule, Job
from backend.services.alert_delivery import deliver_due
from backend.services.jobs import transition_job

API = "/api/v1/alerts/rules"
INTERNAL_URLS = [
    "http://127.0.0.1:8080/hook",
    "http://localhost/hook",
    "http://0.0.0.0/hook",
    "http://2130706433/hook",  # 127.0.0.1 as one decimal number
    "http://0177.0.0.1/hook",  # octal
    "http://127.1/hook",
    "http://user@127.0.0.1/hook",
    "http://hooks.example.com@127.0.0.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",  # IPv4-mapped IPv6
    "http://169.254.169.254/latest/meta-data",  # cloud metadata
    "http://10.1.2.3/hook",
    "http://192.168.0.1/hook",
    "http://100.64.0.1/hook",
    "http://224.0.0.1/hook",
    "https://hooks.example.com/a\r\nX-Injected: 1",
    "https://hooks.example.com/a b",
    "https://hooks.example.com\\@127.0.0.1/",
]


def _team(backend: Any) -> tuple[Any, dict[Role, dict[str, str]]]:
    team = backend.make_team()
    return team, {role: backend.auth_headers(backend.make_user(team, role), team) for role in Role}


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_internal_webhook_urls_are_refused_at_save_by_default(pg_backend: Any, url: str) -> None:
    _, headers = _team(pg_backend)
    admin = headers[Role.admin]
    body = {"name": "r", "events": ["job_failed"], "channel": "webhook", "url": url}
    with pg_backend.client() as client:
        created = client.post(API, json=body, headers=admin)
        assert created.status_code == 422, (url, created.text)
        assert created.json()["detail"][0]["loc"][-1] == "url", created.text
        rule = client.post(API, json={**body, "url": "https://hooks.example.com/ok"}, headers=admin)
        assert rule.status_code == 201, rule.text
        patched = client.patch(f"{API}/{rule.json()['id']}", json={"url": url}, headers=admin)
        assert patched.status_code == 422 and patched.json()["detail"][0]["loc"][-1] == "url", patched.text
        assert client.get(f"{API}/{rule.json()['id']}", headers=admin).json()["url"] == "https://hooks.example.com/ok"


def test_the_operator_allow_list_lets_a_named_address_through(pg_backend: Any) -> None:
    _, headers = _team(pg_backend)
    body = {"name": "r", "events": ["job_failed"], "channel": "webhook", "url": "http://127.0.0.1:8080/hook"}
    with pg_backend.client(egress_allow="127.0.0.1") as client:
        assert client.post(API, json=body, headers=headers[Role.admin]).status_code == 201
        other = client.post(API, json={**body, "url": "http://10.1.2.3/hook"}, headers=headers[Role.admin])
        assert other.status_code == 422 and "STREAMRL_EGRESS_ALLOW" in other.text  # only what is named


def _failing_job(backend: Any, team: Any) -> None:
    with backend.session() as session:
        job = Job(team_id=team.id, name="alerted", spec={}, status=JobStatus.running, target_instances=1)
        session.add(job)
        session.flush()
        transition_job(session=session, job=job, to=JobStatus.failed, error="boom")


def _deliveries(backend: Any, settings: Any, rule: AlertRule) -> list[AlertDelivery]:
    def done() -> list[AlertDelivery] | None:
        deliver_due(settings, backend.engine)
        with backend.session() as session:
            rows = list(session.scalars(select(AlertDelivery).where(AlertDelivery.rule_id == rule.id)))
        return rows if rows and all(row.state != "pending" for row in rows) else None

    return wait_until(done, 60, "the deliveries to finish")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_stored_internal_url_is_refused_at_send(pg_backend: Any, webhook_receiver: WebhookReceiver,
                                                  host: str) -> None:
    """A row saved before the policy, or a public name that now resolves inward (`localhost` stands for it): the
    send-time check refuses it and the receiver gets nothing; the allow-list delivers to the checked address."""
    team = pg_backend.make_team()
    url = webhook_receiver.url.replace("127.0.0.1", host)
    with pg_backend.session() as session:
        rule = AlertRule(team_id=team.id, name="r", events=["job_failed"], channel="webhook", url=url, recipients=[])
        session.add(rule)
    _failing_job(pg_backend, team)
    settings = pg_backend.settings.model_copy(update={"alert_retry_base_s": 0.1, "alert_max_attempts": 1})
    [refused] = _deliveries(pg_backend, settings, rule)
    assert refused.state == "failed" and refused.last_status_code is None
    assert "refused by the egress policy" in (refused.last_error or ""), refused.last_error
    assert webhook_receiver.requests == []

    _failing_job(pg_backend, team)
    allowed = settings.model_copy(update={"egress_allow": "127.0.0.1"})
    rows = _deliveries(pg_backend, allowed, rule)
    assert sorted(row.state for row in rows) == ["failed", "succeeded"]
    assert len(webhook_receiver.requests) == 1


def test_a_failed_delivery_logs_the_status_code_not_the_answer(pg_backend: Any,
                                                               webhook_receiver: WebhookReceiver) -> None:
    team, headers = _team(pg_backend)
    webhook_receiver.statuses = [500]
    webhook_receiver.answer = b"internal error: db password=hunter2 at 10.0.0.5"
    with pg_backend.session() as session:
        rule = AlertRule(team_id=team.id, name="r", events=["job_failed"], channel="webhook",
                         url=webhook_receiver.url, recipients=[])
        session.add(rule)
    _failing_job(pg_backend, team)
    settings = pg_backend.settings.model_copy(update={"egress_allow": "127.0.0.1", "alert_max_attempts": 1})
    [delivery] = _deliveries(pg_backend, settings, rule)
    assert delivery.state == "failed" and delivery.last_status_code == 500 and delivery.last_error == "HTTP 500"
    with pg_backend.client() as client:
        log = client.get(f"{API}/{rule.id}/deliveries", headers=headers[Role.viewer])
    assert log.status_code == 200 and log.json()["data"][0]["log"][0]["error"] == "HTTP 500"
    assert "hunter2" not in log.text and "10.0.0.5" not in log.text


def test_webhook_urls_are_masked_below_admin(pg_backend: Any) -> None:
    _, headers = _team(pg_backend)
    secret_url = "https://hooks.example.com:8443/services/T000/B000/XXXXtokenXXXX?key=abc"
    body = {"name": "r", "events": ["job_failed"], "channel": "webhook", "url": secret_url}
    with pg_backend.client() as client:
        rule = client.post(API, json=body, headers=headers[Role.admin]).json()
        assert rule["url"] == secret_url
        for role in (Role.viewer, Role.member):
            for path in ("", f"/{rule['id']}"):
                answer = client.get(f"{API}{path}", headers=headers[role])
                assert answer.status_code == 200 and "XXXXtokenXXXX" not in answer.text and "abc" not in answer.text
                shown = answer.json()["data"][0] if path == "" else answer.json()
                assert shown["url"] == "https://hooks.example.com:8443/***", (role, shown)
        for role in (Role.admin, Role.owner):
            assert client.get(f"{API}/{rule['id']}", headers=headers[role]).json()["url"] == secret_url
        assert json.dumps(client.get(API, headers=headers[Role.admin]).json()).count(secret_url) == 1


def test_answers_logged_before_are_not_shown(pg_backend: Any) -> None:
    """A delivery logged by an older version kept up to 200 characters of the answer: the API shows the status."""
    team, headers = _team(pg_backend)
    with pg_backend.session() as session:
        rule = AlertRule(team_id=team.id, name="r", events=["job_failed"], channel="webhook",
                         url="https://hooks.example.com/x", recipients=[])
        session.add(rule)
        session.flush()
        session.add(AlertDelivery(rule_id=rule.id, event="test", payload={}, state="failed", attempts=1,
                                  last_status_code=502, last_error="HTTP 502: upstream db-7.internal:5432 refused",
                                  log=[{"at": "2026-01-01T00:00:00+00:00", "status_code": 502, "ms": 3,
                                        "error": "HTTP 502: upstream db-7.internal:5432 refused"}]))
    with pg_backend.client() as client:
        log = client.get(f"{API}/{rule.id}/deliveries", headers=headers[Role.viewer])
    assert log.status_code == 200 and "db-7.internal" not in log.text
    shown = log.json()["data"][0]
    assert shown["last_error"] == "HTTP 502" and shown["log"][0]["error"] == "HTTP 502"
