"""Engines and sessions. `session_scope()` is the unit of work: commit on success, roll back on any error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy import exc as exc_mod
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
    engine = create_engine(url, **kwargs)
    event.listen(engine, "checkout", partial(_ping_if_idle, engine.dialect))
    event.listen(engine, "checkin", _note_checkin)
    return engine


IDLE_PING_S = 1.0


def _ping_if_idle(dialect: Any, dbapi_conn: Any, record: Any, _proxy: Any) -> None:
    """Pessimistic disconnect handling for connections that sat in the pool: one that was idle for IDLE_PING_S or
    more is pinged at checkout, and a dead one is replaced (DisconnectionError makes the pool retry with a fresh
    connection), so a database restart costs no request an error. A connection checked in moments ago (a busy
    server) skips the ping and its round trip; if the server died in between, the query fails, the pool is
    invalidated, and the API answers that one request with a 503 + Retry-After (backend/api/errors.py)."""
    returned = record.info.get("checked_in_at")
    if returned is not None and time.monotonic() - returned < IDLE_PING_S:
        return
    try:
        alive = bool(dialect.do_ping(dbapi_conn))
    except Exception as exc:  # the driver's own error for a dead socket
        raise exc_mod.DisconnectionError(str(exc)) from exc
    if not alive:
        raise exc_mod.DisconnectionError("database connection failed its ping")


def _note_checkin(_dbapi_conn: Any, record: Any) -> None:
    record.info["checked_in_at"] = time.monotonic()


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
