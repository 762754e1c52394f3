"""Sending alert deliveries: webhooks (HMAC-SHA256 signed POST) and e-mail (SMTP), retried with exponential backoff.

`deliver_due` is called by the controller's watch loop (backend/controller/watch.py), never on a request. A due row is
claimed by pushing its `next_attempt_at` one lease ahead in a committed transaction before it is sent (FOR UPDATE
SKIP LOCKED where the database has it), so a process that dies mid-send leaves the row pending and due again when
the lease runs out: every delivery is sent until one attempt succeeds or `alert_max_attempts` have failed.
"""

from __future__ import annotations

import json
import smtplib
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from typing import Any

import httpx
from sqlalchemy import Engine, select

from backend.db.base import utcnow
from backend.db.models import AlertDelivery, AlertRule
from backend.db.session import session_scope
from backend.services.egress import EgressRefused, guarded_client, parse_url
from backend.services.secret_box import SecretUnreadable, unseal
from contract.settings import Settings
from contract.signing import SIGNATURE_HEADER, sign  # the rule's secret signs the body

MAX_BACKOFF_S = 3600.0
SUBJECTS = {"job_failed": "failed", "job_succeeded": "succeeded", "job_stalled": "stalled",
            "training_signal": "training-signal warning"}


@dataclass
class Claimed:
    id: int
    event: str
    payload: dict[str, Any]
    channel: str
    url: str | None
    recipients: list[str]
    secret_token: str | None


@dataclass
class Outcome:
    ok: bool
    status_code: int | None = None
    error: str | None = None


def webhook_body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def _claim(engine: Engine | None, now: datetime, lease_s: float, limit: int) -> list[Claimed]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(AlertDelivery, AlertRule).join(AlertRule, AlertRule.id == AlertDelivery.rule_id)
            .where(AlertDelivery.state == "pending", AlertDelivery.next_attempt_at <= now)
            .order_by(AlertDelivery.next_attempt_at).limit(limit)
            .with_for_update(skip_locked=True, of=AlertDelivery)
        ).all()
        claimed = []
        for delivery, rule in rows:
            delivery.next_attempt_at = now + timedelta(seconds=lease_s)
            claimed.append(Claimed(delivery.id, delivery.event, delivery.payload, rule.channel, rule.url,
                                   list(rule.recipients), rule.secret_encrypted))
    return claimed


def send_webhook(item: Claimed, settings: Settings) -> Outcome:
    if not item.url:
        return Outcome(False, error="the rule has no url")
    body = webhook_body({**item.payload, "delivery_id": item.id})
    headers = {"Content-Type": "application/json", "User-Agent": "StreamRL-Alerts/1",
               "X-StreamRL-Event": item.event, "X-StreamRL-Delivery": str(item.id)}
    if item.secret_token:
        headers[SIGNATURE_HEADER] = sign(unseal(settings.secret_key, item.secret_token), body)
    parse_url(item.url)  # a row saved before the policy: refused here (EgressRefused) like at save
    with guarded_client(settings, timeout=settings.alert_timeout_s) as http:  # connects to checked addresses only
        response = http.post(item.url, content=body, headers=headers)
    if 200 <= response.status_code < 300:
        return Outcome(True, response.status_code)
    # the status code only: the receiver's answer stays out of the log the team's viewers read
    return Outcome(False, response.status_code, f"HTTP {response.status_code}")


def email_message(item: Claimed, settings: Settings) -> EmailMessage:
    job = item.payload.get("job") or {}
    what = SUBJECTS.get(item.event, item.event)
    subject = f"job {job.get('id')} {job.get('name')!r} {what}" if job else f"{item.event}: {item.payload['message']}"
    message = EmailMessage()
    message["Subject"] = f"[StreamRL] {subject}"
    message["From"] = settings.smtp_from
    message["To"] = ", ".join(item.recipients)
    message["X-StreamRL-Event"] = item.event
    message.set_content(f"{item.payload['message']}\n\n{json.dumps(item.payload, indent=2, sort_keys=True)}\n")
    return message


def send_email(item: Claimed, settings: Settings) -> Outcome:
    if not settings.smtp_host:
        return Outcome(False, error="e-mail is not configured on this platform (STREAMRL_SMTP_HOST)")
    smtp_class = smtplib.SMTP_SSL if settings.smtp_tls == "ssl" else smtplib.SMTP
    with smtp_class(settings.smtp_host, settings.smtp_port, timeout=settings.alert_timeout_s) as smtp:
        if settings.smtp_tls == "starttls":
            smtp.starttls(context=ssl.create_default_context())
        if settings.smtp_username:
            smtp.login(settings.smtp_username, settings.smtp_password or "")
        refused = smtp.send_message(email_message(item, settings))
    if refused:
        return Outcome(False, error=f"refused recipients: {', '.join(sorted(refused))}")
    return Outcome(True)


def attempt(item: Claimed, settings: Settings) -> Outcome:
    """One try; every failure (unreachable, timeout, non-2xx, SMTP error, unreadable secret) is an Outcome."""
    try:
        return send_webhook(item, settings) if item.channel == "webhook" else send_email(item, settings)
    except EgressRefused as exc:
        return Outcome(False, error=f"refused by the egress policy: {exc}"[:500])
    except (httpx.HTTPError, OSError, smtplib.SMTPException, SecretUnreadable) as exc:
        return Outcome(False, error=f"{type(exc).__name__}: {exc}"[:500])


def _record(engine: Engine | None, item: Claimed, outcome: Outcome, ms: int, settings: Settings) -> None:
    now = utcnow()
    with session_scope(engine) as session:
        row = session.get(AlertDelivery, item.id)
        if row is None or row.state != "pending":
            return
        row.attempts += 1
        row.log = [*row.log, {"at": now.isoformat(), "status_code": outcome.status_code, "error": outcome.error,
                              "ms": ms}]
        row.last_status_code, row.last_error = outcome.status_code, outcome.error
        if outcome.ok:
            row.state, row.finished_at = "succeeded", now
        elif row.attempts >= settings.alert_max_attempts:
            row.state, row.finished_at = "failed", now
        else:
            delay = min(MAX_BACKOFF_S, settings.alert_retry_base_s * 2 ** (row.attempts - 1))
            row.next_attempt_at = now + timedelta(seconds=delay)


def deliver_due(settings: Settings, engine: Engine | None = None, limit: int = 20) -> int:
    """Send what is due (at most `limit`); the number of attempts made."""
    lease_s = 4 * settings.alert_timeout_s + 5  # longer than any one attempt can take
    claimed = _claim(engine, utcnow(), lease_s, limit)
    for item in claimed:
        started = time.monotonic()
        outcome = attempt(item, settings)
        _record(engine, item, outcome, int((time.monotonic() - started) * 1000), settings)
    return len(claimed)
