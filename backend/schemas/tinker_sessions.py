"""Schemas of the dashboard's Tinker sessions (backend/services/tinker_sessions_view.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class TinkerCheckpointPublic(BaseModel):
    tinker_path: str
    checkpoint_type: str = Field(description="training (save_state) | sampler (save_weights_for_sampler)")
    time: datetime
    size_bytes: int
    public: bool = Field(description="published: loadable by every key of the team")
    expires_at: datetime | None = Field(None, description="when its ttl_seconds runs out; null: never")
    user_metadata: dict[str, str] | None = None


class TinkerStepPublic(BaseModel):
    step: int
    loss: float | None = Field(None, description="mean per-token loss of the step's forward_backward calls")
    step_seconds: float | None = Field(None, description="the session's compute time for the step's calls")
    tokens: int | None = None
    at: datetime


class TinkerSessionPublic(BaseModel):
    """One Tinker training client: a platform job tagged `tinker`."""

    job_id: int
    model_id: str = Field(description="the SDK's model id, <session>:train:<n>")
    owner: str | None = Field(None, description="e-mail of the user who created it")
    api_key: str | None = Field(None, description="name of the API key that created it")
    base_model: str
    lora_rank: int | None = None
    status: str
    parked: bool = Field(description="parked: holds no training slot; its next call restores it")
    steps: int = Field(description="optimizer steps recorded")
    last_call: datetime | None = Field(None, description="its newest step or session event")
    user_metadata: dict[str, str] | None = Field(None, description="create_lora_training_client(user_metadata=)")
    checkpoints: list[TinkerCheckpointPublic] = Field(default_factory=list)


class TinkerSessionDetail(TinkerSessionPublic):
    steps_series: list[TinkerStepPublic] = Field(default_factory=list, description="every recorded step, oldest first")
