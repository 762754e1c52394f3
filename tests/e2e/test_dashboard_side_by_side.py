"""The same prompt's samples side by side in a browser: from the compare page across runs, and from a sample on a
job page across that run's iterations and checkpoints."""

from __future__ import annotations

import re

import pytest
from e2e_runs import add_checkpoint, finished_run, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.job_data import record_samples

pytestmark = pytest.mark.e2e
PROMPT = "What is 12 + 30?"


def _store(engine: Engine, job_id: int, rows: list[tuple[int, str, str, float]]) -> None:
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job_id, samples=[
            {"iteration": it, "sample_id": f"{job_id}:{it}:{k}", "prompt": prompt, "response": response,
             "reward": reward, "length": len(response), "policy_version": it - 1, "instance_id": "gen-0"}
            for k, (it, prompt, response, reward) in enumerate(rows)])


def test_same_prompt_across_runs_and_checkpoints(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "side")
    early = finished_run(engine, world, "warmup-off", [0.1, 0.2])
    late = finished_run(engine, world, "warmup-on", [0.1, 0.6])
    _store(engine, early["id"], [(1, PROMPT, "12 + 30 = 41", 0.0), (2, PROMPT, "It is 41.", 0.0),
                                 (1, "Only here", "?", 0.0)])
    _store(engine, late["id"], [(1, PROMPT, "42?", 0.0), (2, PROMPT, "12 + 30 = 42", 1.0), (2, PROMPT, "42", 1.0)])
    add_checkpoint(engine, api_server, late["id"], 2)

    open_signed_in(page, api_server, world.token, f"/compare?ids={early['id']},{late['id']}")
    page.get_by_role("link", name="Samples side by side").click()
    expect(page).to_have_url(re.compile(rf"samples\?ids={early['id']}%2C{late['id']}"))
    prompts = page.get_by_test_id("prompt-list").locator("li")
    expect(prompts).to_have_count(2)
    expect(prompts.first).to_contain_text(PROMPT)  # the prompt both runs answered comes first
    expect(prompts.first).to_contain_text("2 runs · 4 iterations · 5 samples")
    prompts.first.get_by_role("button").click()
    columns = page.get_by_test_id("side-columns")
    off, on = columns.get_by_test_id(f"side-column-{early['id']}"), columns.get_by_test_id(f"side-column-{late['id']}")
    expect(off.locator("h3")).to_have_text("warmup-off")
    expect(on.get_by_test_id("side-iteration-2")).to_contain_text("12 + 30 = 42")
    expect(on.get_by_test_id("side-iteration-2")).to_contain_text("checkpoint")
    expect(on.get_by_test_id("side-iteration-2")).to_contain_text("mean reward 1.000")
    expect(off.get_by_test_id("side-iteration-2")).to_contain_text("It is 41.")
    expect(off.get_by_test_id("side-iteration-2")).not_to_contain_text("checkpoint")
    off_box, on_box = off.bounding_box(), on.bounding_box()
    assert off_box and on_box and on_box["x"] > off_box["x"] + off_box["width"] - 1  # side by side, not stacked
    assert abs(on_box["y"] - off_box["y"]) < 2
    shot(page, "54-samples-side-by-side")
    page.get_by_label("search prompts").fill("only")
    expect(prompts).to_have_count(1)
    expect(prompts.first).to_contain_text("Only here")

    page.goto(f"{api_server.url}/#/jobs/{late['id']}")  # a sample on the job page -> its iterations side by side
    samples = page.get_by_test_id("samples")
    samples.locator("tbody tr", has_text="42?").click()
    page.get_by_test_id("sample-detail").get_by_role("link", name=re.compile("across iterations")).click()
    expect(page.get_by_role("heading", name="Same prompt across iterations")).to_be_visible()
    expect(page.get_by_test_id("side-prompt")).to_have_text(PROMPT)
    one = page.get_by_test_id("side-columns")
    expect(one.locator("section h3")).to_have_text(["warmup-on · iteration 1", "warmup-on · iteration 2"])
    expect(one.get_by_test_id(f"side-column-{late['id']}:1")).to_contain_text("42?")
    expect(one.get_by_test_id(f"side-column-{late['id']}:2")).to_contain_text("checkpoint")
    shot(page, "55-samples-across-checkpoints")
