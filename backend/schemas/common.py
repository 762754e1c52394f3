"""Shared pieces of the API schemas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict


def _as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
T = TypeVar("T")
MAX_ID = 2**31 - 1  # ids are 32-bit integer columns on Postgres: larger ones are 422, not a database error
MAX_OFFSET = 2**31 - 1


class ORMModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class Page(BaseModel, Generic[T]):
    """`{data: [...], count}`; `count` is the total matching, not the page length."""

    data: list[T]
    count: int


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: `detail` is a message, or for 422 a list of issues naming the field (`loc`)."""

    detail: str | list[ValidationIssue]
