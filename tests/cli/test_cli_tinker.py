"""`streamrl tinker sessions` and `streamrl tinker session ID` against a real API server: a training client made
through the Tinker API (with user_metadata), its steps recorded as its worker records them."""

from __future__ import annotations

import uuid

import httpx
import pytest

from backend.db.session import make_engine, session_scope
from backend.services.job_data import record_iteration

from .conftest import Invoke, Server

pytestmark = pytest.mark.integration


def test_tinker_sessions_and_one_session(cli: Invoke, owner: str, api_server: Server) -> None:
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    created_key = cli("--json", "keys", "create", "notebook", "--scope", "read", "--scope", "write")
    assert created_key.exit_code == 0, created_key.stderr
    key = created_key.json()
    assert isinstance(key, dict)
    headers = {"X-API-Key": key["secret"]}
    tinker = f"{api_server.url}/tinker/api/v1"
    session_id = httpx.post(f"{tinker}/create_session", headers=headers, json={}).json()["session_id"]
    made = httpx.post(f"{tinker}/create_model", headers=headers, json={
        "session_id": session_id, "model_seq_id": 0, "base_model": model, "lora_config": {"rank": 2},
        "user_metadata": {"run": "cli", "lr": 0.001}})
    assert made.status_code == 200, made.text
    model_id = made.json()["model_id"]
    bad = httpx.post(f"{tinker}/create_model", headers=headers, json={
        "session_id": session_id, "model_seq_id": 1, "base_model": model, "lora_config": {"rank": 2},
        "user_metadata": {"run": "x" * 2000}})
    assert bad.status_code == 400 and "user_metadata['run']" in bad.json()["detail"]

    listing = cli("--json", "tinker", "sessions")
    assert listing.exit_code == 0, listing.stderr
    sessions = listing.json()
    assert isinstance(sessions, list)
    mine = next(s for s in sessions if s["model_id"] == model_id)
    assert mine["owner"] == owner and mine["user_metadata"] == {"run": "cli", "lr": "0.001"} and mine["steps"] == 0
    engine = make_engine(api_server.database_url)
    with session_scope(engine) as session:
        for step, loss in ((1, 3.0), (2, 2.0)):
            record_iteration(session=session, job_id=mine["job_id"], iteration=step,
                             metrics={"loss": loss, "step_seconds": 0.05, "tokens": 12})
    engine.dispose()

    table = cli("tinker", "sessions")
    assert table.exit_code == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if model_id in line)
    assert model in row and owner in row and "run=cli, lr=0.001" in row and " 2 " in row
    one = cli("tinker", "session", str(mine["job_id"]))
    assert one.exit_code == 0, one.stderr
    assert "api_key" in one.stdout and "notebook" in one.stdout and "steps:" in one.stdout
    assert [line.split()[:2] for line in one.stdout.split("steps:")[1].splitlines()[2:]] == [["1", "3"],
                                                                                              ["2", "2"]]
    missing = cli("tinker", "session", "999999")
    assert missing.exit_code != 0 and "not found" in (missing.stderr + missing.stdout)
