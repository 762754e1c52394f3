"""Schemas of notification rules and their delivery log."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from backend.schemas.common import ORMModel, RequestModel, UtcDatetime
from backend.services.egress import parse_url
from contract.events import AlertEvent

Channel = Literal["webhook", "email"]
DeliveryState = Literal["pending", "succeeded", "failed"]
EMAIL = re.compile(r"^[^@\s<>,;]+@[^@\s<>,;]+\.[^@\s<>,;]+$")
SECRET_RULE = "16-200 characters; omitted on create: one is generated and shown once"


def _check_url(url: str | None) -> str | None:
    """Strict parsing here (422 naming `url`); where the host resolves is checked by the service (egress policy)."""
    if url is None:
        return None
    parse_url(url)  # EgressRefused is a ValueError: its message is the 422's
    return url


def _check_events(events: list[AlertEvent] | None) -> list[AlertEvent] | None:
    if events is not None and len(set(events)) != len(events):
        raise ValueError("each event at most once")
    return events


def _check_recipients(recipients: list[str] | None) -> list[str] | None:
    for address in recipients or []:
        if not EMAIL.match(address):
            raise ValueError(f"{address!r} is not an e-mail address")
    return recipients


class AlertRuleCreate(RequestModel):
    name: str = Field(min_length=1, max_length=200)
    events: list[AlertEvent] = Field(min_length=1, max_length=10)
    channel: Channel
    url: str | None = Field(None, max_length=2000, description="webhook: where the signed POST goes")
    secret: str | None = Field(None, min_length=16, max_length=200, description=f"webhook HMAC key: {SECRET_RULE}")
    recipients: list[str] = Field(default_factory=list, max_length=20, description="email: addresses to notify")
    enabled: bool = True

    _url = field_validator("url")(_check_url)
    _events = field_validator("events")(_check_events)
    _recipients = field_validator("recipients")(_check_recipients)


class AlertRuleUpdate(RequestModel):
    """Fields to change; the channel is fixed (make a new rule instead)."""

    name: str | None = Field(None, min_length=1, max_length=200)
    events: list[AlertEvent] | None = Field(None, min_length=1, max_length=10)
    url: str | None = Field(None, max_length=2000)
    secret: str | None = Field(None, min_length=16, max_length=200, description="webhook: a new HMAC key")
    recipients: list[str] | None = Field(None, max_length=20)
    enabled: bool | None = None

    _url = field_validator("url")(_check_url)
    _events = field_validator("events")(_check_events)
    _recipients = field_validator("recipients")(_check_recipients)


class AlertRulePublic(ORMModel):
    id: int
    name: str
    events: list[AlertEvent]
    channel: Channel
    url: str | None = Field(description="webhook: where the POST goes; shown to admins only, others see the scheme "
                            "and host with the rest masked (`https://hooks.example.com/***`): URLs often carry tokens")
    recipients: list[str]
    enabled: bool
    secret_set: bool = Field(description="webhook: whether a signing secret is stored (it is never shown again)")
    created_at: UtcDatetime
    updated_at: UtcDatetime


class AlertRuleCreated(AlertRulePublic):
    secret: str | None = Field(description="webhook: the signing secret, shown this once")


class DeliveryAttempt(BaseModel):
    at: str
    status_code: int | None = None
    error: str | None = None
    ms: int


class AlertDeliveryPublic(ORMModel):
    id: int
    rule_id: int
    job_id: int | None
    event: str
    state: DeliveryState
    attempts: int
    next_attempt_at: UtcDatetime | None = Field(description="pending: when the next attempt is due")
    last_status_code: int | None
    last_error: str | None
    log: list[DeliveryAttempt]
    payload: dict[str, Any]
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
