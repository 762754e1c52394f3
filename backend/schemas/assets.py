"""Schemas for datasets and registered models."""

from __future__ import annotations

from pydantic import Field

from backend.schemas.common import ORMModel, RequestModel, UtcDatetime


class DatasetPublic(ORMModel):
    id: int
    name: str
    row_count: int
    checksum: str
    size_bytes: int
    created_at: UtcDatetime


class ModelCreate(RequestModel):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[\w.\-/:]+$")
    path: str = Field(min_length=1, max_length=1000)


class ModelPublic(ORMModel):
    id: int
    name: str
    path: str
    created_at: UtcDatetime
