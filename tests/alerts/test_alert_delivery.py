"""Deliveries against real servers started by the test: a job that fails notifies a webhook (HMAC-SHA256 signed,
retried with backoff after the receiver first answers 500, every attempt in the rule's log) and an SMTP inbox
(aiosmtpd); a stall recorded by the controller's check notifies too; a disabled rule and an unsubscribed event do
not."""

from __future__ import annotations

import hashlib
import hmac
from email import message_from_string
from typing import Any

from alert_servers import SmtpInbox, WebhookReceiver
from sqlalchemy import select
from waiting import wait_until

from backend.db.enums import JobStatus
from backend.db.models import AlertDelivery, AlertRule, Job
from backend.services.alert_delivery import SIGNATURE_HEADER, deliver_due
from backend.services.jobs import record_event, transition_job
from backend.services.secret_box import seal
from contract import events

SECRET = "whsec_test-secret-0123456789"
LOOPBACK = {"egress_allow": "127.0.0.1"}  # the operator's allow-list names the test's receiver (services/egress.py)


def _job(backend: Any, team: Any, status: JobStatus = JobStatus.running) -> Job:
    with backend.session() as session:
        job = Job(team_id=team.id, name="alerted", spec={}, status=status, target_instances=1)
        session.add(job)
    return job


def _rule(backend: Any, team: Any, **fields: Any) -> AlertRule:
    with backend.session() as session:
        rule = AlertRule(team_id=team.id, name=fields.pop("name", "r"), **fields)
        session.add(rule)
    return rule


def _fail(backend: Any, job: Job, error: str = "the trainer ran out of memory") -> None:
    with backend.session() as session:
        transition_job(session=session, job=session.get(Job, job.id), to=JobStatus.failed, error=error)


def _deliveries(backend: Any, rule: AlertRule) -> list[AlertDelivery]:
    with backend.session() as session:
        return list(session.scalars(select(AlertDelivery).where(AlertDelivery.rule_id == rule.id)
                                    .order_by(AlertDelivery.id)))


def _deliver_until_done(backend: Any, settings: Any, rule: AlertRule) -> list[AlertDelivery]:
    def done() -> list[AlertDelivery] | None:
        deliver_due(settings, backend.engine)
        rows = _deliveries(backend, rule)
        return rows if rows and all(row.state != "pending" for row in rows) else None

    return wait_until(done, 60, "the deliveries to finish")


def test_failed_job_webhook_is_signed_and_retried_after_500(pg_backend: Any, webhook_receiver: WebhookReceiver
                                                           ) -> None:
    team = pg_backend.make_team()
    rule = _rule(pg_backend, team, events=["job_failed"], channel="webhook", url=webhook_receiver.url,
                 recipients=[], secret_encrypted=seal(pg_backend.settings.secret_key, SECRET))
    job = _job(pg_backend, team)
    webhook_receiver.statuses = [500]
    _fail(pg_backend, job)
    settings = pg_backend.settings.model_copy(update={**LOOPBACK, "alert_retry_base_s": 0.5})

    [delivery] = _deliver_until_done(pg_backend, settings, rule)
    assert delivery.state == "succeeded" and delivery.attempts == 2 and delivery.last_status_code == 200
    assert [entry["status_code"] for entry in delivery.log] == [500, 200]
    assert delivery.log[0]["error"].startswith("HTTP 500")
    assert len(webhook_receiver.requests) == 2
    for request in webhook_receiver.requests:
        expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(request.headers[SIGNATURE_HEADER.lower()], expected)
        body = request.json()
        assert body["event"] == "job_failed" and body["job"] == {"id": job.id, "name": "alerted", "status": "failed"}
        assert "out of memory" in body["message"] and body["delivery_id"] == delivery.id
        assert request.headers["x-streamrl-event"] == "job_failed"
    tampered = webhook_receiver.requests[0].body.replace(b"alerted", b"altered")
    forged = "sha256=" + hmac.new(SECRET.encode(), tampered, hashlib.sha256).hexdigest()
    assert forged != webhook_receiver.requests[0].headers[SIGNATURE_HEADER.lower()]


def test_gives_up_after_max_attempts_with_the_error_logged(pg_backend: Any, webhook_receiver: WebhookReceiver
                                                          ) -> None:
    team = pg_backend.make_team()
    rule = _rule(pg_backend, team, events=["job_failed"], channel="webhook", url=webhook_receiver.url, recipients=[])
    webhook_receiver.statuses = [503, 503, 503]
    _fail(pg_backend, _job(pg_backend, team))
    settings = pg_backend.settings.model_copy(update={**LOOPBACK, "alert_retry_base_s": 0.2, "alert_max_attempts": 3})
    [delivery] = _deliver_until_done(pg_backend, settings, rule)
    assert delivery.state == "failed" and delivery.attempts == 3
    assert [entry["status_code"] for entry in delivery.log] == [503, 503, 503]
    assert SIGNATURE_HEADER.lower() not in webhook_receiver.requests[0].headers  # no secret stored: unsigned


def test_unreachable_webhook_is_an_error_in_the_log(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    rule = _rule(pg_backend, team, events=["job_failed"], channel="webhook", url="http://127.0.0.1:9/nothing",
                 recipients=[])
    _fail(pg_backend, _job(pg_backend, team))
    settings = pg_backend.settings.model_copy(update={**LOOPBACK, "alert_retry_base_s": 0.2, "alert_max_attempts": 2})
    [delivery] = _deliver_until_done(pg_backend, settings, rule)
    assert delivery.state == "failed" and delivery.last_status_code is None
    assert all(entry["error"] and "Connect" in entry["error"] for entry in delivery.log)


def test_email_over_smtp_and_only_subscribed_enabled_rules(pg_backend: Any, smtp_inbox: SmtpInbox,
                                                           webhook_receiver: WebhookReceiver) -> None:
    team = pg_backend.make_team()
    mail = _rule(pg_backend, team, events=["job_succeeded", "job_stalled"], channel="email",
                 recipients=["ml@example.com", "oncall@example.com"])
    only_failures = _rule(pg_backend, team, events=["job_failed"], channel="webhook", url=webhook_receiver.url,
                          recipients=[])
    disabled = _rule(pg_backend, team, events=["job_succeeded"], channel="webhook", url=webhook_receiver.url,
                     recipients=[], enabled=False)
    job = _job(pg_backend, team)
    with pg_backend.session() as session:
        record_event(session=session, job_id=job.id, kind=events.STALLED, message="stalled: no iteration for 300 s")
        transition_job(session=session, job=session.get(Job, job.id), to=JobStatus.succeeded)
    settings = pg_backend.settings.model_copy(update={"smtp_host": smtp_inbox.host, "smtp_port": smtp_inbox.port,
                                                      "smtp_tls": "none", "smtp_from": "alerts@streamrl.test"})
    rows = _deliver_until_done(pg_backend, settings, mail)
    assert [(row.event, row.state) for row in rows] == [("job_stalled", "succeeded"), ("job_succeeded", "succeeded")]
    assert _deliveries(pg_backend, only_failures) == [] and _deliveries(pg_backend, disabled) == []
    assert len(smtp_inbox.messages) == 2
    stalled, succeeded = (message_from_string(m["data"]) for m in smtp_inbox.messages)
    assert smtp_inbox.messages[0]["to"] == ["ml@example.com", "oncall@example.com"]
    assert smtp_inbox.messages[0]["from"] == "alerts@streamrl.test"
    assert stalled["Subject"] == f"[StreamRL] job {job.id} 'alerted' stalled"
    assert "no iteration for 300 s" in stalled.get_payload()
    assert succeeded["Subject"] == f"[StreamRL] job {job.id} 'alerted' succeeded"


def test_smtp_down_is_retried_then_delivered(pg_backend: Any, smtp_inbox: SmtpInbox) -> None:
    team = pg_backend.make_team()
    rule = _rule(pg_backend, team, events=["job_failed"], channel="email", recipients=["ml@example.com"])
    _fail(pg_backend, _job(pg_backend, team))
    down = pg_backend.settings.model_copy(update={"smtp_host": "127.0.0.1", "smtp_port": 9, "smtp_tls": "none",
                                                  "alert_retry_base_s": 0.2})
    assert deliver_due(down, pg_backend.engine) >= 1
    [first] = _deliveries(pg_backend, rule)
    assert first.state == "pending" and first.attempts == 1 and first.last_error
    up = down.model_copy(update={"smtp_port": smtp_inbox.port})
    [delivery] = _deliver_until_done(pg_backend, up, rule)
    assert delivery.state == "succeeded" and delivery.attempts == 2 and len(smtp_inbox.messages) == 1
