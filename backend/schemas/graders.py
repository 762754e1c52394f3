"""POST /graders/run: a reward or grader spec run on one pasted sample (OpenAI's graders/run)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from contract.spec import RewardSpec

MAX_SAMPLE_CHARS = 100_000


class GraderSample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    output_text: str = Field(max_length=MAX_SAMPLE_CHARS, description="the model's response ({{ sample.output_text }})")


class GraderRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grader: RewardSpec = Field(description="a reward spec as in a job's `reward` (a grader or a built-in; not python)")
    sample: GraderSample
    item: dict[str, Any] = Field(default_factory=dict, description="the dataset row ({{ item.KEY }}): the meta")
    prompt: str = Field("", max_length=MAX_SAMPLE_CHARS, description="the prompt, for built-ins that read it")


class GraderRunResult(BaseModel):
    reward: float = Field(description="the score (0.0 when `error` is set)")
    sub_rewards: dict[str, float] = Field(description="multi: each sub-grader's score by name; a composite's parts")
    passed: bool | None = Field(description="score >= pass_threshold, where the grader declares one")
    error: str | None = Field(description="why the sample could not be graded (e.g. the item lacks a field)")
