"""Forks in a browser: "⑂ fork" beside a checkpoint starts a new run from it with a new learning rate (POST
/jobs/{id}/fork) and opens it; the fork's job page, the runs list and the compare view show its parent."""

from __future__ import annotations

import re

import pytest
from e2e_runs import add_checkpoint, finished_run, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

pytestmark = pytest.mark.e2e


def test_fork_a_checkpoint_and_see_the_tree(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "forks")
    parent = finished_run(engine, world, "base-run", [0.1, 0.4, 0.5])
    add_checkpoint(engine, api_server, parent["id"], 2)
    open_signed_in(page, api_server, world.token, f"/jobs/{parent['id']}")
    row = page.get_by_test_id("checkpoints").locator("li", has_text="iteration 2")
    row.locator("[data-action=fork]").click()
    form = page.get_by_test_id("fork-form")
    form.get_by_label("fork learning rate").fill("0.00002")
    form.get_by_label("fork mode").select_option("async")
    shot(page, "62-fork-form")
    form.locator("[data-action=start-fork]").click()
    expect(page).not_to_have_url(re.compile(rf"/jobs/{parent['id']}$"))
    fork_id = int(re.search(r"/jobs/(\d+)", page.url).group(1))  # type: ignore[union-attr]
    lineage = page.get_by_test_id("lineage")
    expect(lineage).to_contain_text(f"fork of #{parent['id']} at iteration 2")
    fork = world.api.get(f"/jobs/{fork_id}")
    assert fork["spec"]["training"]["lr"] == 2e-5 and fork["spec"]["mode"] == "async"
    assert (fork["parent_job_id"], fork["parent_iteration"]) == (parent["id"], 2)

    open_signed_in(page, api_server, world.token, "/jobs")
    expect(page.get_by_test_id(f"run-{fork_id}").get_by_test_id("lineage")).to_contain_text(f"#{parent['id']}")
    expect(page.get_by_test_id(f"run-{parent['id']}").get_by_test_id("lineage")).to_have_count(0)
    open_signed_in(page, api_server, world.token, f"/compare?ids={parent['id']},{fork_id}")
    expect(page.get_by_test_id("chip-parent")).to_have_count(1)
    expect(page.get_by_test_id("chip-parent")).to_contain_text(f"#{parent['id']}@2 (compared)")
    shot(page, "63-fork-compare")
