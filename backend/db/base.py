"""Declarative base: constraint naming convention (needed for Alembic batch mode on SQLite) and column helpers."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, DateTime, Enum, MetaData
from sqlalchemy.orm import DeclarativeBase, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSON,
        list[str]: JSON,
    }


def enum_column(enum_cls: type[StrEnum], **kwargs: Any) -> Any:
    """A VARCHAR column holding the enum's values (portable: no native Postgres enum types to migrate)."""
    return mapped_column(
        Enum(enum_cls, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e]), **kwargs
    )


def created_at_column(**kwargs: Any) -> Any:
    return mapped_column(default=utcnow, **kwargs)
