"""Deployments page (issue 40): from the navigation, a member creates a scale-to-zero deployment of a registered base
model with the form, sees it listed with its replicas and metrics columns, keeps one replica warm by editing the scale
fields in place (the API says min_replicas 1), is refused a min above the max (the error names the field), and
deletes it; and promotes a LoRA job's checkpoint into a new deployment from the job page's Checkpoints card."""

from __future__ import annotations

import uuid

import pytest
from e2e_runs import add_checkpoint, finished_run, new_team
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

pytestmark = pytest.mark.e2e


def test_create_scale_and_delete_a_deployment(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"deploy-{tag}@example.com", PASSWORD, f"team-deploy-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    open_signed_in(page, api_server, session["token"], "/jobs")

    page.get_by_role("link", name="Deployments", exact=True).click()
    expect(page.get_by_text("no deployments yet")).to_be_visible()
    form = page.get_by_test_id("create-deployment")
    form.get_by_label("name", exact=True).fill("support")
    form.get_by_label("base model").fill("tiny-1m")
    form.get_by_label("new max replicas").fill("2")
    form.get_by_role("button", name="Create deployment").click()
    row = page.locator("tr[data-deployment=support]")
    expect(row).to_contain_text("tiny-1m")
    expect(row.get_by_test_id("replicas")).to_contain_text("0 ready")
    expect(row.get_by_test_id("replicas")).to_contain_text("0–2, scales to zero")

    row.get_by_label("min replicas").fill("1")
    row.locator("[data-action=save-scale]").click()
    expect(row.get_by_test_id("replicas")).to_contain_text("1–2")
    listed = api.http.get("/deployments").json()
    assert [(d["name"], d["min_replicas"], d["max_replicas"]) for d in listed] == [("support", 1, 2)]
    shot(page, "40-deployments-page")

    row.get_by_label("min replicas").fill("3")
    row.locator("[data-action=save-scale]").click()
    expect(page.get_by_role("alert").first).to_contain_text("min_replicas")
    row.locator("[data-action=delete]").click()
    expect(page.get_by_text("no deployments yet")).to_be_visible()
    assert api.http.get("/deployments").json() == []


def test_promote_a_checkpoint_from_the_job_page(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "promote")
    job = finished_run(engine, world, "adapter-run", [0.2, 0.4], training={"lora": {"rank": 4, "alpha": 8.0}})
    (add_checkpoint(engine, api_server, job["id"], 2) / "adapter").mkdir()  # the LoRA checkpoint's adapter part
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    checkpoints = page.get_by_test_id("checkpoints")
    checkpoints.locator("[data-action=promote]").click()
    checkpoints.get_by_label("deployment name").fill("support-bot")
    checkpoints.locator("[data-action=promote-confirm]").click()
    expect(checkpoints.get_by_test_id("promoted")).to_contain_text("support-bot")
    listed = world.api.http.get("/deployments").json()
    assert [(d["name"], d["base_model"], d["adapters"]) for d in listed] == [
        ("support-bot", "tiny", [f"job:{job['id']}@2"])]
    page.get_by_role("link", name="Deployments", exact=True).click()
    expect(page.locator("tr[data-deployment=support-bot]")).to_contain_text(f"job:{job['id']}@2")
