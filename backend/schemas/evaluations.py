"""Evaluations API bodies (backend/api/routes/evaluations.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backend.schemas.common import ORMModel, UtcDatetime
from contract.spec import EvalSuiteSpec


class EvaluationCreate(BaseModel):
    """Evaluate `model` (a registered model name, or `job:<id>@best|@last|@<iteration>`) or a job's `checkpoint`
    (`job_id` + `checkpoint`: an iteration, `best` or `last`) on `suite`: a suite object, or the name of one of the
    job's suites."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(None, min_length=1, max_length=400)
    job_id: int | None = Field(None, ge=1, le=2**31 - 1)
    checkpoint: int | str | None = Field(None, description="iteration, 'best' or 'last' (default last)")
    suite: EvalSuiteSpec | str


class EvaluationPublic(ORMModel):
    id: int
    status: str = Field(description="queued | running | succeeded | failed")
    model: str
    job_id: int | None
    iteration: int | None
    suite_name: str
    summary: dict[str, float] | None = Field(None, description="mean, pass@1, pass@k, k, prompts, samples")
    error: str | None
    created_at: UtcDatetime
    finished_at: UtcDatetime | None


class EvaluationRow(BaseModel):
    prompt_id: str
    prompt: str
    answer: Any = None
    outputs: list[str]
    scores: list[float]
    errors: list[str] = Field(default_factory=list)


class EvaluationDetail(EvaluationPublic):
    suite: dict[str, Any]
    rows: list[EvaluationRow] = Field(default_factory=list, description="per prompt: its outputs and their scores")
