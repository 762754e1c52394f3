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

from backend.cli.config import CLIConfig
from backend.cli.errors import CLIError
from backend.client import APIError, StreamRLClient

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


def bootstrap_admin(api_url: str, data_dir: Path) -> str | None:
    """Log the CLI in as the embedded setup's owner, creating that account on the first run. Returns its token."""
    creds_path = data_dir / CREDENTIALS_FILE
    with StreamRLClient(api_url) as api:
        if creds_path.exists():
            creds = json.loads(creds_path.read_text())
            try:
                token = api.login(creds["email"], creds["password"])["token"]
            except APIError as exc:
                typer.echo(f"up: could not log in with {creds_path} ({exc.message}); use `streamrl login`")
                return None
            _remember(api_url, token)
            typer.echo(f"up: CLI logged in as {creds['email']} (password in {creds_path})")
            return str(token)
        creds = {"email": ADMIN_EMAIL, "password": secrets.token_urlsafe(12), "team": ADMIN_TEAM}
        try:
            api.register(creds["email"], creds["password"], creds["team"])
        except APIError as exc:
            typer.echo(f"up: no owner account created ({exc.message}); use `streamrl login`")
            return None
        _write_private(creds_path, creds)
        token = api.login(creds["email"], creds["password"])["token"]
    _remember(api_url, token)
    typer.echo(f"up: created the owner account  email: {creds['email']}  password: {creds['password']}  "
               f"(team {creds['team']!r}; saved in {creds_path}; the CLI is logged in)")
    return str(token)
