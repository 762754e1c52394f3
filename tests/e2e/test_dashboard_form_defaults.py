"""The submit form's per-choice defaults (issue 39): switching LoRA on moves a default learning rate to the adapter
default and says why; the default reward carries the length term and says why; the submitted spec has both."""

from __future__ import annotations

import re

import pytest
from e2e_runs import World, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def test_lora_choice_moves_the_default_lr_and_the_reward_has_a_length_term(page: Page, api_server: Server) -> None:
    world: World = new_team(api_server, "form-defaults")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("input[name=lr]")).to_have_value("0.003")
    expect(page.get_by_test_id("reward-note")).to_contain_text("most untrained samples hit max_tokens")
    page.locator("select[name=lora]").select_option("on")
    expect(page.locator("input[name=lr]")).to_have_value("0.01")
    expect(page.get_by_test_id("lr-note")).to_contain_text("an adapter needs a larger rate")
    shot(page, "39-form-lora-defaults")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    spec = world.api.get(f"/jobs/{job_id}")["spec"]
    world.api.post(f"/jobs/{job_id}/cancel")
    assert spec["training"]["lr"] == 0.01 and spec["training"]["lora"]["rank"] == 16
    assert '"length": 0.2 * fits' in spec["reward"]["code"]
