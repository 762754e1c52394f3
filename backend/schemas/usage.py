"""Usage answers (GET /usage): device-seconds by pool and tokens, grouped by team, job, API key or day."""

from __future__ import annotations

from pydantic import BaseModel, Field

from backend.schemas.common import UtcDatetime
from backend.services.usage import GroupBy


class UsageFigures(BaseModel):
    generation_device_seconds: float = Field(description="generation instances' device time (each iteration's time x "
                                             "its live instances x devices per instance; inference calls' shares of "
                                             "the engine's steps)")
    training_device_seconds: float = Field(description="training devices' time (each iteration's time x "
                                           "training.devices; a Tinker step's compute time)")
    device_seconds: float = Field(description="both pools")
    tokens_generated: int = Field(description="response tokens the policy (or an inference call) sampled")
    tokens_trained: int = Field(description="prompt + response tokens the trainer processed")


class UsageRowPublic(UsageFigures):
    id: int | None = Field(description="the team's, job's or API key's id; null: on-demand inference (group_by "
                           "job), sessions without a key (group_by key), a day")
    name: str = Field(description="team name, job name, key name, or the day (YYYY-MM-DD, UTC)")


class TeamBudgetPublic(BaseModel):
    max_device_hours_per_month: float | None
    used_device_hours_this_month: float
    month_start: UtcDatetime


class UsagePublic(BaseModel):
    group_by: GroupBy
    start: UtcDatetime = Field(description="`from` (inclusive)")
    end: UtcDatetime = Field(description="`to` (exclusive)")
    rows: list[UsageRowPublic]
    total: UsageFigures
    budget: TeamBudgetPublic
