"""Schemas of the dashboard's read models: job health, the runs table and the spec as YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from backend.schemas.common import Page, UtcDatetime
from backend.schemas.jobs import JobPublic

HealthState = Literal[
    "queued",
    "paused",
    "generating",
    "waiting_for_instances",
    "driver_lost",
    "restarting_driver",
    "resuming",
    "stalled",
    "crash_looping",
    "reward_errors",
    "training_signal",
    "succeeded",
    "failed",
    "cancelled",
]


class InstanceHealth(BaseModel):
    """Generation instances by what the database says they are doing (not what was asked for)."""

    target: int
    running: int  # status running with a heartbeat no older than the silence limit
    pending: int  # asked for, never started (status starting, no heartbeat yet)
    silent: int  # status running, heartbeat older than the silence limit
    dead_recent: int  # declared dead within the crash-loop window
    oldest_pending_s: float | None  # how long the oldest pending instance has waited


SignalCheck = Literal["nan_loss", "reward_constant", "all_truncated", "reward_stuck", "reward_flat", "kl_blowup",
                      "entropy_collapse",
                      "mismatch_high"]


class TrainingSignal(BaseModel):
    """A check on the recorded iterations that says the job is not learning (backend/services/signals.py)."""

    check: SignalCheck
    severity: Literal["warning", "error"]  # error: the updates are void (NaN, no signal); warning: suspicious
    message: str  # one line naming the figure and what to change
    since_iteration: int  # the first iteration of the window the check fired on


class JobHealth(BaseModel):
    state: HealthState
    healthy: bool
    summary: str  # one line for the list and the page header
    latest_error: str | None
    instances: InstanceHealth
    last_progress_at: UtcDatetime | None  # the newest iteration, else the start of the job
    seconds_since_progress: float | None
    stall_after_s: float  # no iteration for this long while running counts as stalled
    reward_errors_latest: int  # samples whose reward failed in the newest iteration
    reward_errors_total: int
    signals: list[TrainingSignal] = []  # training-signal checks that fire on the newest iterations, worst first


class RunPublic(JobPublic):
    """A row of the runs table: the job plus what the table sorts and filters by."""

    health: JobHealth
    duration_s: float | None
    eval_reward: float | None  # newest iteration that recorded one


RunsPublic = Page[RunPublic]
