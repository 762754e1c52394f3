"""Schemas for jobs and what they record. `JobCreate` is the shared `JobSpec`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from backend.db.enums import JobStatus
from backend.schemas.common import ORMModel, Page, RequestModel, UtcDatetime
from contract.spec import JobSpec

JobCreate = JobSpec


class Progress(BaseModel):
    iteration: int
    total_iterations: int


class JobPublic(BaseModel):
    id: int
    name: str
    status: JobStatus
    spec: dict[str, Any]
    target_instances: int
    running_instances: int
    autoscale: bool
    created_by: int | None
    created_by_email: str | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    error: str | None
    progress: Progress
    latest_metrics: dict[str, Any] | None
    ptl_profile: dict[str, Any] | None


JobsPublic = Page[JobPublic]


class JobScale(RequestModel):
    target_instances: int | None = Field(None, ge=1, le=1024)
    autoscale: bool | None = None


class JobEventPublic(ORMModel):
    id: int
    kind: str
    message: str
    data: dict[str, Any] | None
    created_at: UtcDatetime


class IterationPublic(ORMModel):
    iteration: int
    metrics: dict[str, Any]
    created_at: UtcDatetime


class SamplePublic(ORMModel):
    sample_id: str
    iteration: int
    prompt: str
    response: str
    reward: float
    length: int
    policy_version: int
    instance_id: str
    reward_components: dict[str, float] | None = None
    reward_error: str | None = None


class SpanPublic(ORMModel):
    lane: str
    kind: str
    start: float
    end: float


class TimelinePublic(BaseModel):
    spans: list[SpanPublic]


class CheckpointPublic(ORMModel):
    iteration: int
    path: str
    created_at: UtcDatetime
