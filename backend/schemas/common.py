"""Shared pieces of the API schemas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Generic, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator


def _as_utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite hands back naive UTC


UtcDatetime = Annotated[datetime, AfterValidator(_as_utc)]
T = TypeVar("T")
MAX_ID = 2**31 - 1  # ids are 32-bit integer columns on Postgres: larger ones are 422, not a database error
MAX_OFFSET = 2**31 - 1


def _accepts_bool(annotation: Any) -> bool:
    return annotation is bool or annotation is Any or bool in get_args(annotation)


class RequestModel(BaseModel):
    """Base of request bodies: `true`/`false` are not numbers (pydantic's lax mode would read them as 1/0) and
    floats must be finite."""

    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and not _accepts_bool(field.annotation):
            raise ValueError("true/false is not accepted here")
        return value


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
