"""Shared pieces of the API schemas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict


def _as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
T = TypeVar("T")


class ORMModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Page(BaseModel, Generic[T]):
    """`{data: [...], count}`; `count` is the total matching, not the page length."""

    data: list[T]
    count: int
