"""`alembic upgrade head` builds the schema on empty Postgres and SQLite, and models and migrations agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from backend.db.base import Base
from backend.db.migrate import alembic_config, upgrade_database
from backend.db.session import make_engine

EXPECTED_TABLES = {
    "teams",
    "users",
    "memberships",
    "team_invitations",
    "api_keys",
    "datasets",
    "models",
    "jobs",
    "evaluations",
    "deployments",
    "job_events",
    "alert_rules",
    "alert_deliveries",
    "tracker_credentials",
    "tracker_runs",
    "usage_records",
    "iterations",
    "job_samples",
    "timeline_spans",
    "checkpoints",
    "workers",
    "generation_instances",
    "revoked_sessions",
    "login_failures",
    "alembic_version",
}


def _diff(url: str) -> list[object]:
    engine = make_engine(url)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
    engine.dispose()
    return list(diff)


@pytest.mark.parametrize("db", ["postgres", "sqlite"])
def test_upgrade_head_on_empty_database_creates_every_table(db: str, pg_url: str, sqlite_url: str) -> None:
    url = pg_url if db == "postgres" else sqlite_url  # both fixtures ran `alembic upgrade head` on an empty db
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) == EXPECTED_TABLES
    engine.dispose()


@pytest.mark.parametrize("db", ["postgres", "sqlite"])
def test_models_and_migrations_agree(db: str, pg_url: str, sqlite_url: str) -> None:
    assert _diff(pg_url if db == "postgres" else sqlite_url) == []


def test_downgrade_to_base_and_upgrade_again_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'roundtrip.db'}"
    upgrade_database(url)
    command.downgrade(alembic_config(url), "base")
    engine = make_engine(url)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    upgrade_database(url)
    assert _diff(url) == []
