"""Usage answers (GET /usage): device-seconds by pool and tokens, grouped by team, job, API key or day."""

from __future__ import annotations

from typing import Literal

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


class JobEstimatePublic(BaseModel):
    """GET /jobs/{id}/eta: when the job should finish and what it costs (backend/services/job_eta.py)."""

    iterations_done: int
    iterations_total: int | None = Field(description="training.iterations; null for a Tinker session")
    remaining_iterations: int | None = Field(description="0 once the job finished")
    seconds_per_iteration: float | None = Field(description="median iteration_seconds of the newest 10 iterations "
                                                "(basis recent_iterations), else wall time per iteration (wall_time)")
    basis: Literal["recent_iterations", "wall_time"] | None
    eta_s: float | None = Field(description="seconds until the last iteration; null when the job is not progressing "
                                "or has no iteration yet (`note` says why)")
    finishes_at: UtcDatetime | None
    note: str | None = Field(description="why there is no ETA")
    usage: UsageFigures = Field(description="the job's usage so far (as GET /usage?job_id=)")
    device_seconds_per_iteration: float | None = Field(description="mean device-seconds of a recorded iteration")
    projected_device_seconds: float | None = Field(description="usage so far + the remaining iterations at the mean")
    max_device_seconds: float | None = Field(description="the job's limits.max_device_seconds")
    team_max_device_hours_per_month: float | None = Field(description="the team's monthly budget (device-hours)")
    team_used_device_hours_this_month: float
    month_start: UtcDatetime
