"""Schemas for datasets and registered models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from backend.schemas.common import ORMModel, RequestModel, UtcDatetime


class DatasetPublic(ORMModel):
    id: int
    name: str
    row_count: int  # 0 until a Hub dataset is ready
    checksum: str
    size_bytes: int
    state: Literal["downloading", "ready", "failed"] = "ready"
    error: str | None = None
    source: Literal["upload", "hub"] = "upload"
    hub_id: str | None = None
    revision: str | None = None
    split: str | None = None
    created_at: UtcDatetime


class DatasetHubCreate(RequestModel):
    """A Hub dataset id + revision + split, downloaded and validated in the background like a Hub model."""

    name: str = Field(min_length=1, max_length=200)
    hub_id: str = Field(min_length=1, max_length=200, description="Hugging Face dataset id (owner/name)")
    revision: str = Field("main", min_length=1, max_length=200, description="branch, tag or commit")
    split: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][\w.\-]*$",
                       description="the split whose files are imported (train, test, ...)")


class PreviewRow(BaseModel):
    text: str  # the prompt as the engine sees it (chat rows rendered with the model's template)
    tokens: int  # its length in the model's tokens
    chat: bool
    meta: dict[str, Any]  # the row's other columns (what the reward gets)


class LengthBin(BaseModel):
    lo: float
    hi: float
    count: int


class PromptLengths(BaseModel):
    count: int
    p50: float
    p90: float
    max: int
    bins: list[LengthBin]


class DatasetPreview(BaseModel):
    chat_template: bool
    rows: list[PreviewRow]
    prompt_tokens: PromptLengths


MODEL_NAME = r"^[\w.\-/:]+$"


class ModelCreate(RequestModel):
    """Exactly one source: `path` (a directory the server allows) or `hub_id` (+ `revision`, downloaded once)."""

    name: str = Field(min_length=1, max_length=200, pattern=MODEL_NAME)
    path: str | None = Field(None, min_length=1, max_length=1000, description="model directory on the server")
    hub_id: str | None = Field(None, min_length=1, max_length=200, description="Hugging Face model id (owner/name)")
    revision: str = Field("main", min_length=1, max_length=200, description="branch, tag or commit (hub_id only)")

    @model_validator(mode="after")
    def _one_source(self) -> ModelCreate:
        if (self.path is None) == (self.hub_id is None):
            raise ValueError("give exactly one of `path` (a server directory) or `hub_id` (a Hub model id); "
                             "upload an archive with POST /models/upload")
        return self


class ModelCard(BaseModel):
    architecture: str
    model_type: str
    parameters: int | None = None  # None: .bin weights (not counted without torch)
    dtype: str | None = None
    context_length: int | None = None
    vocab_size: int
    chat_template: bool
    disk_bytes: int


class ModelPublic(ORMModel):
    id: int
    name: str
    version: int  # 1, 2, ...: registering a name again adds a version; a spec's name means the newest
    path: str
    state: Literal["downloading", "ready", "failed"]
    error: str | None = None
    source: Literal["directory", "archive", "hub"]
    hub_id: str | None = None
    revision: str | None = None
    card: ModelCard | None = None
    progress: dict[str, int] | None = None  # {done_bytes, total_bytes} of a Hub download
    created_at: UtcDatetime


class HubTokenUpdate(RequestModel):
    token: str | None = Field(None, max_length=500, description="the team's Hugging Face token; null forgets it")


class HubTokenPublic(BaseModel):
    token_set: bool  # the token itself is never returned
