"""Deployments API bodies (backend/api/routes/deployments.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.schemas.common import ORMModel, RequestModel, UtcDatetime

IDLE = "seconds without requests after which a replica above min_replicas stops"


class DeploymentCreate(RequestModel):
    """A registered base model with some of the team's LoRA adapters (ft: ids or job:<id>@best|@last|@<N>), served on
    /openai/v1 as `model=<name>` (the first adapter; the base model without adapters) or `model=<adapter id>`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=64)
    base_model: str = Field(min_length=1, max_length=400)
    adapters: list[str] = Field(default_factory=list, max_length=32)
    min_replicas: int = Field(0, ge=0, le=16, description="0: scale to zero when idle")
    max_replicas: int = Field(1, ge=1, le=16)
    idle_s: float = Field(300.0, ge=1, le=86400, description=IDLE)


class DeploymentUpdate(RequestModel):
    """The fields to change; a new base model or adapter list restarts the replicas (they finish what they serve)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str | None = Field(None, min_length=1, max_length=64)
    base_model: str | None = Field(None, min_length=1, max_length=400)
    adapters: list[str] | None = Field(None, max_length=32)
    min_replicas: int | None = Field(None, ge=0, le=16)
    max_replicas: int | None = Field(None, ge=1, le=16)
    idle_s: float | None = Field(None, ge=1, le=86400, description=IDLE)


class DeploymentPromote(RequestModel):
    """Serve `adapter` (a checkpoint: `job:<id>@<iteration>|@best|@last` or an ft: id) as the first adapter of the
    deployment `name`, created over `base_model` when the team has none so named."""

    model_config = ConfigDict(extra="forbid")

    adapter: str = Field(min_length=1, max_length=400)
    name: str = Field(min_length=1, max_length=64)
    base_model: str | None = Field(None, min_length=1, max_length=400)


class ReplicaPublic(BaseModel):
    id: str
    replica: int
    state: str = Field(description="starting | ready | failed")
    in_flight: int = 0
    served: int = 0
    node: str | None = None
    error: str | None = None


class DeploymentMetrics(BaseModel):
    window_s: float
    requests: int
    requests_per_s: float
    p50_latency_s: float | None
    p99_latency_s: float | None
    tokens_per_s: float
    total_calls: int
    last_call_at: float | None
    batches: dict[str, Any] = Field(description="steps, mixed_steps (steps mixing adapters), max_adapters (most "
                                                "adapters in one step), replica (the one that batched them)")


class DeploymentPublic(ORMModel):
    id: int
    name: str
    base_model: str
    adapters: list[str]
    min_replicas: int
    max_replicas: int
    idle_s: float
    version: int
    created_at: UtcDatetime
    updated_at: UtcDatetime
    replicas: list[ReplicaPublic] = Field(default_factory=list)
    metrics: DeploymentMetrics | None = None
