"""Schemas of the queue (backend/services/queue_view.py): why each waiting item waits, and the queue by team."""

from __future__ import annotations

from pydantic import BaseModel, Field


class JobRef(BaseModel):
    id: int
    name: str


class QueuePublic(BaseModel):
    """Why a queued job or session waits. Holders are named for the caller's own team; another team's are counts."""

    position: int = Field(description="1 = the next to start")
    reason: str = Field(description="what it waits for and who holds it")
    waiting_for: str = Field(description="training_slots | generation_slots | quota:max_concurrent_jobs | "
                             "quota:max_generation_instances")
    eta_s: float | None = Field(None, description="estimated seconds until it starts (from recorded iteration "
                                "times); null when no estimate exists")
    needs: dict[str, int] = Field(default_factory=dict, description="slots it asks for per pool: its gang of "
                                  "training slots and its target generation instances (it may start with fewer)")
    held_by: list[JobRef] = Field(default_factory=list, description="the caller's team's jobs holding the resource")
    held_by_other_teams: int = Field(0, description="jobs of other teams holding it")


class QueueItemPublic(BaseModel):
    """One waiting item in the whole queue; another team's item has no id, name or team name."""

    position: int
    priority: str
    team: str  # the caller's team's name, or `other team <k>` (a stable label within one answer)
    own: bool
    job_id: int | None
    job_name: str | None
    waiting_for: str
    reason: str
    eta_s: float | None
    needs: dict[str, int]


class QueueGroup(BaseModel):
    """Waiting items of one team and priority, with the slots they ask for."""

    team: str
    own: bool
    priority: str
    waiting: int
    training_slots: int
    generation_slots: int


class QueueListing(BaseModel):
    items: list[QueueItemPublic]
    groups: list[QueueGroup]
    updated_s: float | None = Field(None, description="seconds since the scheduler's last pass; null: none lately")
