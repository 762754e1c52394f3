"""Deployments page (issue 40): from the navigation, a member creates a scale-to-zero deployment of a registered base
model with the form, sees it listed with its replicas and metrics columns, keeps one replica warm by editing the scale
fields in place (the API says min_replicas 1), is refused a min above the max (the error names the field), and
deletes it."""

from __future__ import annotations

import uuid

import pytest
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

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
