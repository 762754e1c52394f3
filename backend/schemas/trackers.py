"""Schemas of a team's experiment-tracker connections: secrets are write-only (listed as set / not set)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from backend.schemas.common import RequestModel, UtcDatetime
from backend.services.egress import parse_url

TrackerKind = Literal["mlflow", "wandb"]
SETTINGS = {"mlflow": ("tracking_uri", "username"), "wandb": ("base_url", "entity")}
SECRETS = {"mlflow": ("token", "password"), "wandb": ("api_key",)}


def _http_url(url: str | None) -> str | None:
    """Strict parsing (422 naming the field); where the host resolves is checked by the service (egress policy)."""
    if url is None:
        return None
    parse_url(url)  # EgressRefused is a ValueError: its message is the 422's
    return url.rstrip("/")


class TrackerCredentialsUpdate(RequestModel):
    """Fields of the kind in the path; an omitted secret keeps the stored one, an empty string clears it. Changing the
    server URL (mlflow `tracking_uri`, wandb `base_url`) forgets every stored secret not given again with it."""

    tracking_uri: str | None = Field(None, max_length=2000, description="mlflow: the tracking server")
    username: str | None = Field(None, max_length=200, description="mlflow: basic-auth user")
    password: str | None = Field(None, max_length=1000, description="mlflow: basic-auth password (write-only)")
    token: str | None = Field(None, max_length=4000, description="mlflow: bearer token (write-only)")
    base_url: str | None = Field(None, max_length=2000, description="wandb: a self-hosted server (default: the cloud)")
    entity: str | None = Field(None, max_length=128, description="wandb: the entity (team or user) runs go to")
    api_key: str | None = Field(None, max_length=200, description="wandb: API key (write-only)")

    _urls = field_validator("tracking_uri", "base_url")(_http_url)


class TrackerCredentialsPublic(BaseModel):
    kind: TrackerKind
    tracking_uri: str | None = None
    username: str | None = None
    base_url: str | None = None
    entity: str | None = None
    secrets: dict[str, bool] = Field(description="each secret field: whether a value is stored (never the value)")
    updated_at: UtcDatetime


class TrackerRunPublic(BaseModel):
    tracker: str
    run_ref: str | None = Field(description="the tracker's run id (TensorBoard: the log directory)")
    sent_iteration: int = Field(description="iterations up to this one are in the tracker")
    finished: bool
    down_since: UtcDatetime | None = Field(description="set while the tracker is unreachable: metrics are buffered")
    last_error: str | None
