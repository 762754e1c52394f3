"""Run the Alembic migrations programmatically (the app's `auto_migrate`, tests, `streamrl up`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from backend.db.session import normalize_database_url

REPO_ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", normalize_database_url(url).replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_database(url: str, revision: str = "head") -> None:
    """`alembic upgrade head` on `url`; creates the SQLite file's directory first."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)
