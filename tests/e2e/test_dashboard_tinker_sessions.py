"""The Sessions page in a browser (docs/tinker.md#on-the-dashboard): a Tinker training client made through the Tinker
API with user_metadata, its steps and a named save with a TTL and user_metadata, recorded as its worker and the API
record them (the services they call, no worker running); the page lists it (owner, base model, steps, parked,
user metadata) and its detail shows the loss and step-time charts and the checkpoint with its expiry. Another team
gets a 404 for it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from e2e_runs import new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.enums import JobStatus
from backend.db.models import Job
from backend.db.session import session_scope
from backend.services.job_data import record_iteration
from backend.services.jobs import transition_job

pytestmark = pytest.mark.e2e


def test_sessions_page_lists_a_session_with_its_steps_and_checkpoints(page: Page, api_server: Server,
                                                                       engine: Engine) -> None:
    world = new_team(api_server, "sessions")
    key = world.api.post("/keys", json={"name": "notebook", "scopes": ["read", "write"]})["secret"]
    tinker = f"{api_server.url}/tinker/api/v1"
    headers = {"X-API-Key": key}
    session_id = httpx.post(f"{tinker}/create_session", headers=headers, json={}).json()["session_id"]
    created = httpx.post(f"{tinker}/create_model", headers=headers, json={
        "session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 4},
        "user_metadata": {"experiment": "sessions-page"}}).json()
    saved = httpx.post(f"{tinker}/save_weights", headers=headers, json={
        "model_id": created["model_id"], "path": "step-3", "seq_id": 1, "ttl_seconds": 3600,
        "user_metadata": {"note": "best so far"}})
    assert saved.status_code == 200, saved.text
    with session_scope(engine) as session:  # served three steps (as its worker records them), then parked
        job = session.query(Job).filter(Job.name == created["model_id"]).one()
        job_id, team_id = job.id, job.team_id
        for status in (JobStatus.starting, JobStatus.running):
            transition_job(session=session, job=job, to=status)
        for step, loss in ((1, 2.5), (2, 1.75), (3, 1.25)):
            record_iteration(session=session, job_id=job_id, iteration=step,
                             metrics={"loss": loss, "step_seconds": 0.02 * step, "tokens": 15})
        transition_job(session=session, job=job, to=JobStatus.parked)
    save = Path(api_server.data_dir) / "artifacts" / "tinker" / str(team_id) / str(job_id) / "weights" / "step-3"
    save.mkdir(parents=True, exist_ok=True)  # the save the session writes
    (save / "adapter_model.safetensors").write_bytes(b"0" * 64)

    listed = {s["job_id"]: s for s in world.api.get("/tinker/sessions")}
    mine = listed[job_id]
    assert mine["steps"] == 3 and mine["parked"] is True and mine["user_metadata"] == {"experiment": "sessions-page"}
    assert mine["api_key"] == "notebook" and mine["checkpoints"][0]["user_metadata"] == {"note": "best so far"}
    assert mine["checkpoints"][0]["expires_at"] is not None
    stranger = new_team(api_server, "sessions-other")
    assert stranger.api.http.get(f"/tinker/sessions/{job_id}").status_code == 404

    open_signed_in(page, api_server, world.token, "/sessions")
    row = page.get_by_test_id(f"session-{job_id}")
    expect(row).to_contain_text(created["model_id"])
    expect(row).to_contain_text("tiny")
    expect(row).to_contain_text("experiment=sessions-page")
    expect(row.get_by_test_id("parked")).to_be_visible()
    expect(row.locator("td").nth(4)).to_have_text("3")
    row.click()
    expect(page.get_by_test_id("session-charts").locator("canvas")).to_have_count(2)
    checkpoint = page.get_by_test_id("session-checkpoint")
    expect(checkpoint).to_contain_text(f"tinker://{created['model_id']}/weights/step-3")
    expect(checkpoint.get_by_test_id("checkpoint-expiry")).to_contain_text("expires")
    expect(checkpoint).to_contain_text("note=best so far")
    shot(page, "24-tinker-sessions")
