"""First-run steps of `streamrl up`: wait for the API, create the owner account, log the CLI in."""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import typer

from backend.client import APIError, StreamRLClient
from streamrl.cli.config import CLIConfig
from streamrl.cli.errors import CLIError

ADMIN_EMAIL = "admin@streamrl.local"
ADMIN_TEAM = "default"
CREDENTIALS_FILE = "admin.json"


def wait_for_health(api_url: str, stop: threading.Event, alive: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Block until GET /api/v1/health answers 200; fail if the API process dies or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set():
        try:
            if httpx.get(f"{api_url}/api/v1/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if not alive():
            raise CLIError("the API process exited during start-up (see its output above)")
        if time.monotonic() > deadline:
            raise CLIError(f"the API did not answer {api_url}/api/v1/health within {timeout_s:.0f}s")
        stop.wait(0.25)


def _remember(api_url: str, token: str) -> None:
    config = CLIConfig.load()
    config.remember(api_url, token)
    config.save()


def _write_private(path: Path, data: dict[str, str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)


def count_users(database_url: str) -> int:
    from sqlalchemy import func, select

    from backend.db.models import User
    from backend.db.session import make_engine, session_scope

    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            return int(session.scalar(select(func.count(User.id))) or 0)
    finally:
        engine.dispose()


def create_owner(database_url: str, email: str, password: str, team: str) -> None:
    """A user owning a new team, written straight to the database (works when the API refuses registration)."""
    from backend.db.session import make_engine, session_scope
    from backend.services import teams

    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            teams.register(session=session, email=email, password=password, team_name=team)
    finally:
        engine.dispose()


def set_platform_admin(database_url: str, email: str, *, grant: bool) -> bool:
    """Flag (or unflag) an existing account as a platform admin, straight in the database: the operator's own way to
    vouch for an account (a self-registered one included). False when no account has that email."""
    from sqlalchemy import select

    from backend.db.models import User
    from backend.db.session import make_engine, session_scope

    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            user = session.scalar(select(User).where(User.email == email.strip().lower()))
            if user is None:
                return False
            user.is_platform_admin = grant
            return True
    finally:
        engine.dispose()


def bootstrap_admin(api_url: str, data_dir: Path, database_url: str) -> str | None:
    """Log the CLI in as the embedded setup's owner; on a database without users, create that owner first.

    Returns the session token, or None when there is nothing to log in with (accounts made some other way)."""
    creds_path = data_dir / CREDENTIALS_FILE
    if creds_path.exists():
        creds = json.loads(creds_path.read_text())
        created = False
    elif count_users(database_url) == 0:
        creds = {"email": ADMIN_EMAIL, "password": secrets.token_urlsafe(12), "team": ADMIN_TEAM}
        create_owner(database_url, creds["email"], creds["password"], creds["team"])
        _write_private(creds_path, creds)
        created = True
    else:
        typer.echo("up: the database already has accounts: log the CLI in with `streamrl login`")
        return None
    with StreamRLClient(api_url) as api:
        try:
            token = str(api.login(creds["email"], creds["password"])["token"])
        except APIError as exc:
            typer.echo(f"up: could not log in with {creds_path} ({exc.message}); use `streamrl login`")
            return None
    _remember(api_url, token)
    if created:
        typer.echo(f"up: created the owner account  email: {creds['email']}  password: {creds['password']}  "
                   f"(team {creds['team']!r}; saved in {creds_path}; the CLI is logged in)")
    else:
        typer.echo(f"up: CLI logged in as {creds['email']} (password in {creds_path})")
    return token
