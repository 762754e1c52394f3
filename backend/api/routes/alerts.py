"""Notification rules of the current team (webhook or e-mail) and each rule's delivery log."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import SplitResult, urlsplit

from fastapi import APIRouter, Path, Query, Response, status

from backend.api.deps import AdminAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.db.enums import Role
from backend.db.models import AlertDelivery, AlertRule
from backend.schemas.alerts import (
    AlertDeliveryPublic,
    AlertRuleCreate,
    AlertRuleCreated,
    AlertRulePublic,
    AlertRuleUpdate,
)
from backend.schemas.common import MAX_ID, MAX_OFFSET, Page
from backend.services import alerts as alert_service

router = APIRouter(prefix="/alerts", tags=["alerts"], responses=errors(*AUTHENTICATED))
RuleId = Annotated[int, Path(ge=1, le=MAX_ID, description="alert rule id")]
ANSWER_AFTER_STATUS = re.compile(r"^(HTTP \d{3}):.*", re.DOTALL)


def masked_url(url: str | None) -> str | None:
    """Scheme and host of a webhook URL, the rest (path, query: where tokens sit) masked."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    port = f":{parts.port}" if _has_port(parts) else ""
    return f"{parts.scheme}://{shown}{port}/***"


def _has_port(parts: SplitResult) -> bool:
    try:
        return parts.port is not None
    except ValueError:
        return False


def rule_public(rule: AlertRule, *, reveal_url: bool = True) -> AlertRulePublic:
    """The rule as the API shows it; `reveal_url` False (callers below admin): the webhook URL masked."""
    return AlertRulePublic(
        id=rule.id, name=rule.name, events=rule.events, channel=rule.channel,
        url=rule.url if reveal_url else masked_url(rule.url),
        recipients=rule.recipients, enabled=rule.enabled, secret_set=rule.secret_encrypted is not None,
        created_at=rule.created_at, updated_at=rule.updated_at,
    )


def status_only(error: str | None) -> str | None:
    """An attempt's error without a receiver's answer (rows logged before answers were left out had `HTTP 500: ...`)."""
    return ANSWER_AFTER_STATUS.sub(r"\1", error) if error else error


def delivery_public(row: AlertDelivery) -> AlertDeliveryPublic:
    public = AlertDeliveryPublic.model_validate(row)
    log = [entry.model_copy(update={"error": status_only(entry.error)}) for entry in public.log]
    update: dict[str, Any] = {"log": log, "last_error": status_only(public.last_error)}
    if row.state != "pending":
        update["next_attempt_at"] = None
    return public.model_copy(update=update)


@router.get("/rules")
def list_rules(auth: ViewerAuth, session: SessionDep) -> Page[AlertRulePublic]:
    """The team's notification rules (secrets are never shown: `secret_set` says whether one is stored; webhook URLs
    are masked below admin)."""
    rules = alert_service.list_rules(session=session, team=auth.team)
    reveal = auth.role.at_least(Role.admin)
    return Page(data=[rule_public(rule, reveal_url=reveal) for rule in rules], count=len(rules))


@router.post("/rules", status_code=status.HTTP_201_CREATED)
def create_rule(body: AlertRuleCreate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> AlertRuleCreated:
    """Create a rule (admin); a webhook rule's answer holds its signing secret, shown this once."""
    rule, secret = alert_service.create_rule(session=session, team=auth.team, user=auth.user, body=body,
                                             settings=settings)
    session.commit()
    return AlertRuleCreated(**rule_public(rule).model_dump(), secret=secret)


@router.get("/rules/{rule_id}")
def get_rule(rule_id: RuleId, auth: ViewerAuth, session: SessionDep) -> AlertRulePublic:
    """One rule of the team (its webhook URL masked below admin)."""
    return rule_public(alert_service.get_rule(session=session, team=auth.team, rule_id=rule_id),
                       reveal_url=auth.role.at_least(Role.admin))


@router.patch("/rules/{rule_id}")
def update_rule(rule_id: RuleId, body: AlertRuleUpdate, auth: AdminAuth, session: SessionDep,
                settings: SettingsDep) -> AlertRulePublic:
    """Change a rule (admin): name, events, url, recipients, enabled, or a new webhook secret."""
    rule = alert_service.get_rule(session=session, team=auth.team, rule_id=rule_id)
    alert_service.update_rule(session=session, rule=rule, body=body, settings=settings)
    session.commit()
    return rule_public(rule)


@router.delete("/rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_rule(rule_id: RuleId, auth: AdminAuth, session: SessionDep) -> Response:
    """Delete a rule (admin) and its delivery log."""
    rule = alert_service.get_rule(session=session, team=auth.team, rule_id=rule_id)
    alert_service.delete_rule(session=session, rule=rule)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/rules/{rule_id}/test", status_code=status.HTTP_202_ACCEPTED)
def test_rule(rule_id: RuleId, auth: AdminAuth, session: SessionDep) -> AlertDeliveryPublic:
    """Queue a `test` delivery of the rule (admin); the controller sends it within seconds: watch the log."""
    rule = alert_service.get_rule(session=session, team=auth.team, rule_id=rule_id)
    delivery = alert_service.make_test_delivery(session=session, team=auth.team, rule=rule)
    session.commit()
    return delivery_public(delivery)


@router.get("/rules/{rule_id}/deliveries")
def list_deliveries(
    rule_id: RuleId, auth: ViewerAuth, session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> Page[AlertDeliveryPublic]:
    """The rule's delivery log, newest first: state, attempts, each attempt's status code or error."""
    rule = alert_service.get_rule(session=session, team=auth.team, rule_id=rule_id)
    rows, total = alert_service.list_deliveries(session=session, rule=rule, limit=limit, offset=offset)
    return Page(data=[delivery_public(row) for row in rows], count=total)
