"""The submit form's per-choice defaults (issue 39): switching LoRA on sets the registry's LoRA defaults
(contract/form_defaults.py: learning rate, target modules with the output head, rank, alpha) and says why; the
default reward carries the length term and says why; the submitted spec equals the registry's values. (That a LoRA
job with these defaults learns: tests/training/test_form_defaults_learn.py.)"""

from __future__ import annotations

import re

import pytest
from e2e_runs import World, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect

from contract.form_defaults import FORM_DEFAULTS

pytestmark = pytest.mark.e2e


def test_lora_choice_moves_the_default_lr_and_the_reward_has_a_length_term(page: Page, api_server: Server) -> None:
    world: World = new_team(api_server, "form-defaults")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("input[name=lr]")).to_have_value("0.003")
    expect(page.get_by_test_id("reward-note")).to_contain_text("most untrained samples hit max_tokens")
    page.locator("select[name=lora]").select_option("on")
    lora = FORM_DEFAULTS["lora"]
    expect(page.locator("input[name=lr]")).to_have_value(f"{lora['training.lr']['value']:g}")
    expect(page.get_by_test_id("lr-note")).to_contain_text(lora["training.lr"]["why"])
    expect(page.get_by_test_id("targets-note")).to_contain_text("without lm_head")
    shot(page, "39-form-lora-defaults")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    spec = world.api.get(f"/jobs/{job_id}")["spec"]
    world.api.post(f"/jobs/{job_id}/cancel")
    training = spec["training"]
    assert training["lr"] == lora["training.lr"]["value"]
    assert training["lora"]["target_modules"] == lora["training.lora.target_modules"]["value"].split(", ")
    assert (training["lora"]["rank"], training["lora"]["alpha"]) == (lora["training.lora.rank"]["value"],
                                                                   lora["training.lora.alpha"]["value"])
    assert '"length": 0.2 * fits' in spec["reward"]["code"]
