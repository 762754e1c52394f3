"""The PostgreSQL pool pings only connections that sat idle (backend/db/session.py): a busy API saves the round trip,
and a connection the server dropped while idle (a restart, an idle timeout) is replaced without an error."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from backend.db.session import IDLE_PING_S, make_engine


def test_idle_connections_are_pinged_and_dead_ones_replaced(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(pg_url, pool_size=1, max_overflow=0)
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    pings: list[Any] = []
    real_ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: pings.append(conn) or real_ping(conn))
    try:
        with engine.connect() as conn:
            first = conn.execute(text("select pg_backend_pid()")).scalar()
        with engine.connect() as conn:  # checked in a moment ago: no ping
            assert conn.execute(text("select pg_backend_pid()")).scalar() == first
        assert len(pings) == 1  # only the very first checkout (a new connection has no check-in time)
        with admin.connect() as conn:
            conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": first})
        time.sleep(IDLE_PING_S + 0.1)
        with engine.connect() as conn:  # idle long enough: pinged, found dead, replaced
            second = conn.execute(text("select pg_backend_pid()")).scalar()
        assert second != first and len(pings) >= 2
    finally:
        engine.dispose()
        admin.dispose()
