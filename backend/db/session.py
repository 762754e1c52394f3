"""Engines and sessions. `session_scope()` is the unit of work: commit on success, roll back on any error."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from backend.private_files import private_sqlite_file


def normalize_database_url(url: str) -> str:
    """`postgresql://` / `postgres://` -> the psycopg 3 driver (the only Postgres driver we install)."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def make_engine(url: str, **kwargs: Any) -> Engine:
    url = normalize_database_url(url)
    if url.startswith("sqlite"):
        database = make_url(url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            private_sqlite_file(database)  # 0600; SQLite gives its WAL/SHM the same mode
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # a request holds its connection from auth to response: the pool matches the server's worker threads (40) closely
    # enough that requests do not queue for a connection (pool_size + max_overflow = 30 per process)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 20)
    return create_engine(url, pool_pre_ping=True, **kwargs)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")  # readers (API) do not block the writer (controller/workers)
    cursor.close()


@lru_cache
def get_engine(url: str | None = None) -> Engine:
    """The process-wide engine for `url` (default: the configured database)."""
    if url is None:
        from contract.settings import get_settings

        url = get_settings().database_url
    return make_engine(url)


# Bind with `SessionLocal.configure(bind=engine)`; `session_scope()` binds to the default engine itself.
SessionLocal = sessionmaker(autoflush=False, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine | None = None) -> Iterator[Session]:
    with SessionLocal(bind=engine or get_engine()) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
