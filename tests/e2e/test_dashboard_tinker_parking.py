"""A parked Tinker training session in a browser (docs/tinker.md#parking): the runs table filters it by its status,
its page shows the `parked` badge, the session's park and restore events (with the restore latency), and cancels it.
The session is made through the Tinker API; its parking is recorded as its worker records it (the services it calls),
with no worker running."""

from __future__ import annotations

import httpx
import pytest
from e2e_runs import new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.enums import JobStatus
from backend.db.models import Job
from backend.db.session import session_scope
from backend.services.jobs import record_event, transition_job

pytestmark = pytest.mark.e2e


def test_a_parked_session_is_shown_filtered_and_cancelled(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "parking")
    key = world.api.post("/keys", json={"name": "tinker", "scopes": ["read", "write"]})["secret"]
    tinker = f"{api_server.url}/tinker/api/v1"
    headers = {"X-API-Key": key}
    session_id = httpx.post(f"{tinker}/create_session", headers=headers, json={}).json()["session_id"]
    created = httpx.post(f"{tinker}/create_model", headers=headers, json={
        "session_id": session_id, "model_seq_id": 0, "base_model": "tiny", "lora_config": {"rank": 4}}).json()
    with session_scope(engine) as session:  # served, idle, parked, woken and restored, idle and parked again
        job = session.query(Job).filter(Job.name == created["model_id"]).one()
        job_id = job.id
        for status in (JobStatus.starting, JobStatus.running, JobStatus.parked, JobStatus.queued,
                       JobStatus.starting, JobStatus.running):
            transition_job(session=session, job=job, to=status)
        record_event(session=session, job_id=job_id, kind="tinker", message=(
            "resumed from its park at step 2 in 1.84s (from the call that woke it to serving it; loading the model "
            "and state took 0.41s)"), data={"tinker": "resumed", "restore_s": 1.84, "load_s": 0.41, "step": 2})
        transition_job(session=session, job=job, to=JobStatus.parked)
    run = httpx.get(f"{tinker}/training_runs/{created['model_id']}", headers=headers).json()
    assert run["parked"] is True and run["last_restore_s"] == 1.84 and run["restores"] == 1

    open_signed_in(page, api_server, world.token, "/jobs")
    page.get_by_label("status filter").select_option("parked")
    row = page.get_by_test_id(f"run-{job_id}")
    expect(row.get_by_test_id("status")).to_have_text("parked")
    expect(page.locator("tbody tr")).to_have_count(1)

    row.get_by_role("link", name=created["model_id"]).click()
    expect(page.get_by_test_id("status").first).to_have_text("parked")
    expect(page.get_by_text("resumed from its park at step 2 in 1.84s")).to_be_visible()
    shot(page, "23-tinker-parked")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel", exact=True).click()
    expect(page.get_by_test_id("status").first).to_have_text("cancelled")
    assert world.api.get(f"/jobs/{job_id}")["status"] == "cancelled"
