"""Run tags and notes in a browser: edited on the job page, shown, filtered and searched in the runs table; read-only
for viewers."""

from __future__ import annotations

import re

import pytest
from e2e_runs import finished_run, new_team
from e2e_support import Server, invited_member, open_signed_in, shot
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine

pytestmark = pytest.mark.e2e


def test_tag_and_note_a_run_then_filter_and_search_the_table(
    page: Page, browser: Browser, api_server: Server, engine: Engine
) -> None:
    world = new_team(api_server, "notes")
    high = finished_run(engine, world, "lr-high", [0.1, 0.5], training={"lr": 3e-4})
    low = finished_run(engine, world, "lr-low", [0.1, 0.2], training={"lr": 1e-5})
    plain = finished_run(engine, world, "untagged", [0.3])
    world.api.http.patch(f"/jobs/{low['id']}", json={"tags": ["sweeps"]}).raise_for_status()

    open_signed_in(page, api_server, world.token, f"/jobs/{high['id']}")
    notes = page.get_by_test_id("job-notes")
    expect(notes.get_by_test_id("job-tags")).to_contain_text("no tags")
    notes.get_by_label("new tags").fill('sweep, lr:3e-4 "bad"')
    notes.get_by_role("button", name="Add tags").click()
    expect(notes).to_contain_text('not a tag: "bad"')  # said before sending; nothing saved
    notes.get_by_label("new tags").fill("sweep, lr:3e-4 keep-me")
    notes.get_by_role("button", name="Add tags").click()
    expect(notes.get_by_test_id("job-tags").locator(".tag-name")).to_have_text(["keep-me", "lr:3e-4", "sweep"])
    notes.get_by_label("remove tag keep-me").click()
    expect(notes.get_by_test_id("job-tags").locator(".tag-name")).to_have_text(["lr:3e-4", "sweep"])
    notes.get_by_label("notes").fill("Diverged after iteration 2.\nTry warmup next.")
    notes.get_by_role("button", name="Save notes").click()
    expect(notes.get_by_test_id("notes-saved")).to_be_visible()
    shot(page, "52-job-tags-notes")
    stored = world.api.get(f"/jobs/{high['id']}")
    assert stored["tags"] == ["lr:3e-4", "sweep"] and stored["notes"] == "Diverged after iteration 2.\nTry warmup next."
    page.reload()  # what was saved is what the page shows
    expect(page.get_by_test_id("job-notes").get_by_label("notes")).to_have_value(stored["notes"])

    page.goto(f"{api_server.url}/#/jobs")
    table = page.get_by_test_id("jobs-table")
    row = table.get_by_test_id(f"run-{high['id']}")
    expect(row.get_by_test_id("run-tags").locator(".tag")).to_have_text(["lr:3e-4", "sweep"])
    expect(row.get_by_test_id("run-notes")).to_have_text("Diverged after iteration 2.")
    expect(table.locator("tbody tr")).to_have_count(3)
    row.get_by_role("button", name="sweep", exact=True).click()  # a tag chip filters by that tag
    expect(page).to_have_url(re.compile(r"tag=sweep"))
    expect(page.get_by_label("tag filter")).to_have_value("sweep")
    expect(table.locator("tbody tr")).to_have_count(1)  # not lr-low: "sweeps" is another tag
    expect(table.get_by_test_id(f"run-{high['id']}")).to_be_visible()
    shot(page, "53-runs-tag-filter")
    page.get_by_label("tag filter").fill("")
    expect(table.locator("tbody tr")).to_have_count(3)
    page.get_by_label("search runs").fill("WARMUP")  # text in the notes, any case
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table.get_by_test_id(f"run-{high['id']}")).to_be_visible()
    page.get_by_label("search runs").fill("sweep")  # tags: sweep (lr-high) and sweeps (lr-low)
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table.get_by_test_id(f"run-{plain['id']}")).to_have_count(0)
    shared = page.url
    page.goto("about:blank")
    page.goto(shared)  # the filters are in the URL
    expect(page.get_by_test_id("jobs-table").locator("tbody tr")).to_have_count(2)

    viewer, token = invited_member(api_server.url, world.api, f"viewer-{world.tag}@example.com", "viewer")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # a fresh tab: no owner session
    viewer_page = context.new_page()
    open_signed_in(viewer_page, api_server, token, f"/jobs/{high['id']}")
    read_only = viewer_page.get_by_test_id("job-notes")
    expect(read_only.get_by_test_id("notes-text")).to_contain_text("Try warmup next.")
    expect(read_only.locator("textarea")).to_have_count(0)
    expect(read_only.get_by_role("button", name="Add tags")).to_have_count(0)
    context.close()
    viewer.http.close()
