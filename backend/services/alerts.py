"""A team's notification rules: create, change, delete, test, and the delivery rows job events turn into.

`enqueue_for_event` runs inside the transaction that records a job event (backend/services/jobs.record_event), so an
event and its deliveries commit together: nothing is lost between them, and sending happens later, off the request
path (backend/services/alert_delivery.py, run by the controller's watch loop).
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import AlertDelivery, AlertRule, Job, JobEvent, Team, User
from backend.schemas.alerts import AlertRuleCreate, AlertRuleUpdate
from backend.services.egress import EgressRefused, check_url
from backend.services.errors import InvalidInput, not_found
from backend.services.secret_box import seal
from contract.events import alert_events_of
from contract.settings import Settings


def list_rules(*, session: Session, team: Team) -> list[AlertRule]:
    return list(session.scalars(select(AlertRule).where(AlertRule.team_id == team.id).order_by(AlertRule.id)))


def get_rule(*, session: Session, team: Team, rule_id: int) -> AlertRule:
    rule = session.scalar(select(AlertRule).where(AlertRule.id == rule_id, AlertRule.team_id == team.id))
    if rule is None:
        raise not_found("alert rule", rule_id)
    return rule


def _check_channel(channel: str, url: str | None, recipients: list[str], settings: Settings) -> None:
    if channel == "webhook":
        if not url:
            raise InvalidInput("a webhook rule needs `url`", loc=("body", "url"))
        try:
            check_url(url, settings)  # where it resolves now; checked again at each send
        except EgressRefused as exc:
            raise InvalidInput(f"`url` is refused: {exc}", loc=("body", "url")) from None
        if recipients:
            raise InvalidInput("`recipients` are for email rules; a webhook rule posts to `url`",
                               loc=("body", "recipients"))
        return
    if not recipients:
        raise InvalidInput("an email rule needs at least one address in `recipients`", loc=("body", "recipients"))
    if url:
        raise InvalidInput("`url` is for webhook rules; an email rule sends to `recipients`", loc=("body", "url"))
    if not settings.smtp_host:
        raise InvalidInput("e-mail is not configured on this platform (the operator sets STREAMRL_SMTP_HOST); "
                           "use a webhook rule", loc=("body", "channel"))


def create_rule(*, session: Session, team: Team, user: User, body: AlertRuleCreate,
                settings: Settings) -> tuple[AlertRule, str | None]:
    """The rule and, for a webhook, its signing secret (the one given, else a generated one) to show once."""
    _check_channel(body.channel, body.url, body.recipients, settings)
    if body.channel == "email" and body.secret is not None:
        raise InvalidInput("`secret` signs webhooks; an email rule has none", loc=("body", "secret"))
    secret = None
    if body.channel == "webhook":
        secret = body.secret or "whsec_" + secrets.token_urlsafe(32)
    rule = AlertRule(
        team_id=team.id, name=body.name, events=list(body.events), channel=body.channel, url=body.url,
        recipients=list(body.recipients), enabled=body.enabled, created_by_id=user.id,
        secret_encrypted=seal(settings.secret_key, secret) if secret else None,
    )
    session.add(rule)
    session.flush()
    return rule, secret


def update_rule(*, session: Session, rule: AlertRule, body: AlertRuleUpdate, settings: Settings) -> AlertRule:
    given = body.model_dump(exclude_unset=True)
    for field in ("name", "events", "enabled"):
        if given.get(field) is not None:
            setattr(rule, field, given[field])
    url = given.get("url", rule.url)
    recipients = given["recipients"] if given.get("recipients") is not None else rule.recipients
    _check_channel(rule.channel, url, recipients, settings)
    rule.url, rule.recipients = url, list(recipients)
    if given.get("secret") is not None:
        if rule.channel != "webhook":
            raise InvalidInput("`secret` signs webhooks; an email rule has none", loc=("body", "secret"))
        rule.secret_encrypted = seal(settings.secret_key, given["secret"])
    session.flush()
    return rule


def delete_rule(*, session: Session, rule: AlertRule) -> None:
    session.delete(rule)
    session.flush()


def list_deliveries(*, session: Session, rule: AlertRule, limit: int, offset: int) -> tuple[list[AlertDelivery], int]:
    """The rule's delivery log, newest first."""
    where = AlertDelivery.rule_id == rule.id
    total = session.scalar(select(func.count()).select_from(AlertDelivery).where(where)) or 0
    rows = session.scalars(select(AlertDelivery).where(where).order_by(AlertDelivery.id.desc())
                           .limit(limit).offset(offset))
    return list(rows), total


def payload(*, event: str, team: Team | None, job: Job | None, message: str, data: dict[str, Any] | None,
            at: str) -> dict[str, Any]:
    """The JSON a webhook receives (and an e-mail shows): stable keys, documented in docs/user-guide.md#alerts."""
    return {
        "event": event,
        "team": {"id": team.id, "name": team.name} if team else None,
        "job": {"id": job.id, "name": job.name, "status": str(job.status)} if job else None,
        "message": message,
        "data": data or {},
        "occurred_at": at,
    }


def make_test_delivery(*, session: Session, team: Team, rule: AlertRule) -> AlertDelivery:
    """A pending `test` delivery of the rule (sent by the watch loop like any other)."""
    from backend.db.base import utcnow

    now = utcnow()
    body = payload(event="test", team=team, job=None, message=f"test of alert rule {rule.name!r}", data=None,
                   at=now.isoformat())
    delivery = AlertDelivery(rule_id=rule.id, event="test", payload=body, next_attempt_at=now)
    session.add(delivery)
    session.flush()
    return delivery


def enqueue_for_event(session: Session, event: JobEvent) -> int:
    """Pending deliveries for every enabled rule of the job's team subscribed to what `event` means; their count."""
    alerts = alert_events_of(event.kind, event.data)
    if not alerts:
        return 0
    job = session.get(Job, event.job_id)
    if job is None:
        return 0
    matched = [(rule, next(alert for alert in alerts if alert in rule.events))
               for rule in session.scalars(select(AlertRule).where(AlertRule.team_id == job.team_id,
                                                                   AlertRule.enabled.is_(True)))
               if any(alert in rule.events for alert in alerts)]  # each rule once, under its most specific alert
    if not matched:
        return 0
    team = session.get(Team, job.team_id)
    for rule, alert in matched:
        body = payload(event=alert, team=team, job=job, message=event.message, data=event.data,
                       at=event.created_at.isoformat())
        session.add(AlertDelivery(rule_id=rule.id, job_id=job.id, event_id=event.id, event=alert, payload=body,
                                  next_attempt_at=event.created_at))
    session.flush()
    return len(matched)
