"""Shared generation instances in a browser: the submit form's "Share generation instances" control (LoRA jobs only)
sends `generation.share` (false for "Own instances") and shows the API's 422 at `generation.share` next to it when a
job that cannot share requires sharing; a LoRA job whose record says `shared_generation` carries a "shared instances"
badge by its instance count on the job page and in the runs table, a job of its own instances none. Shared training
processes likewise: the form's "Share a training process" control (LoRA jobs only) sends `training.share: true` and
shows the API's 422 at `training.share` beside it; a job whose record says `shared_training` carries a "shared
training" badge by its iteration count and in the runs table, next to the shared-instances one when it has both."""

from __future__ import annotations

import re
from typing import Any

import pytest
from e2e_runs import new_team, spec
from e2e_support import Server, fill_name_and_arithmetic, open_signed_in, shot
from playwright.sync_api import Page, Request, expect

pytestmark = pytest.mark.e2e

SHARED_TITLE = "generation runs on instances shared with other LoRA jobs on the same base model"
TRAINING_TITLE = ("training runs in a process shared with other LoRA jobs on the same base model (one training slot; "
                  "each job has its own adapter, optimizer and checkpoints)")


def _is_submit(request: Request) -> bool:
    return request.method == "POST" and request.url.endswith("/api/v1/jobs")


def _lora_form(page: Page, name: str) -> None:
    fill_name_and_arithmetic(page, name)
    expect(page.get_by_test_id("share-field")).to_have_count(0)  # full fine-tuning: nothing to share
    page.locator("select[name=lora]").select_option("on")
    expect(page.locator("select[name=share]")).to_have_value("auto")


def test_submit_form_sends_generation_share_and_names_a_refusal(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "share-form")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    _lora_form(page, "lora-own")
    field = page.get_by_test_id("share-field")
    expect(field).to_contain_text("LoRA jobs on the same base model share one generation process and batch")
    expect(page.locator("select[name=share] option")).to_have_text(
        ["Automatic (LoRA jobs share)", "Own instances", "Require sharing"])
    page.locator("select[name=share]").select_option(label="Own instances")
    with page.expect_request(_is_submit) as sent:
        page.get_by_role("button", name="Submit job").click()
    body: dict[str, Any] = sent.value.post_data_json
    assert body["generation"]["share"] is False
    assert body["training"]["lora"]["rank"] == 16
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert job["spec"]["generation"]["share"] is False
    assert job["shared_generation"] is False
    expect(page.get_by_test_id("kpi-instances")).to_be_visible()
    expect(page.get_by_test_id("shared-badge")).to_have_count(0)  # its own instances: no badge

    page.get_by_role("link", name="Submit job").click()
    _lora_form(page, "lora-colocated")
    page.locator("select[name=mode]").select_option("colocated")  # generates in the trainer's process: cannot share
    page.locator("select[name=share]").select_option(label="Require sharing")
    with page.expect_response(lambda r: _is_submit(r.request)) as answered:
        page.get_by_role("button", name="Submit job").click()
    assert answered.value.status == 422
    detail = answered.value.json()["detail"]
    assert [issue["loc"] for issue in detail] == [["body", "generation", "share"]], detail
    assert answered.value.request.post_data_json["generation"]["share"] is True
    error = field.locator(".field-error")
    expect(error).to_contain_text("cannot share generation instances")
    expect(error).to_contain_text("colocated")
    expect(page).to_have_url(re.compile(r"#/submit$"))  # not submitted
    shot(page, "70-submit-share-refused")

    page.locator("select[name=share]").select_option(label="Automatic (LoRA jobs share)")  # null: no refusal
    with page.expect_request(_is_submit) as sent:
        page.get_by_role("button", name="Submit job").click()
    assert sent.value.post_data_json["generation"]["share"] is None
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert job["shared_generation"] is False  # colocated: cannot share, so its own


def test_a_shared_lora_job_shows_the_shared_badge(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "share-badge")
    shared = world.api.post("/jobs", json=spec("lora-shared", training={"lora": {"rank": 8}}))
    own = world.api.post("/jobs", json=spec("lora-own", training={"lora": {"rank": 8}},
                                            generation={"share": False}))
    assert shared["shared_generation"] is True and own["shared_generation"] is False
    assert world.api.get(f"/jobs/{shared['id']}")["shared_generation"] is True

    open_signed_in(page, api_server, world.token, f"/jobs/{shared['id']}")
    badge = page.get_by_test_id("kpi-instances").get_by_test_id("shared-badge")
    expect(badge).to_have_text("shared instances")
    expect(badge).to_have_attribute("title", SHARED_TITLE)
    expect(page.get_by_test_id("shared-badge")).to_have_count(1)
    shot(page, "71-job-shared-instances")

    page.get_by_role("link", name="← Jobs").click()
    table = page.get_by_test_id("jobs-table")
    expect(table.get_by_test_id(f"run-{shared['id']}").get_by_test_id("shared-badge")).to_have_attribute(
        "title", SHARED_TITLE)
    expect(table.get_by_test_id(f"run-{own['id']}")).to_be_visible()
    expect(table.get_by_test_id(f"run-{own['id']}").get_by_test_id("shared-badge")).to_have_count(0)

    table.get_by_role("link", name="lora-own").click()  # not a second open_signed_in: it signs out at times
    expect(page).to_have_url(re.compile(rf"#/jobs/{own['id']}$"))
    expect(page.get_by_test_id("kpi-instances")).to_be_visible()
    expect(page.get_by_test_id("shared-badge")).to_have_count(0)


def test_submit_form_sends_training_share_and_names_a_refusal(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "train-share-form")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    expect(page.get_by_test_id("training-share-field")).to_have_count(0)  # full fine-tuning: nothing to share
    _lora_form(page, "lora-train-shared")
    field = page.get_by_test_id("training-share-field")
    expect(field).to_contain_text("LoRA jobs on the same base model train in one process and one training slot")
    expect(page.locator("select[name=training_share]")).to_have_value("off")
    page.locator("select[name=training_share]").select_option("on")
    with page.expect_request(_is_submit) as sent:
        page.get_by_role("button", name="Submit job").click()
    body: dict[str, Any] = sent.value.post_data_json
    assert body["training"]["share"] is True
    assert body["training"]["lora"]["rank"] == 16
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert job["spec"]["training"]["share"] is True
    assert job["shared_training"] is True
    expect(page.get_by_test_id("kpi-iteration").get_by_test_id("shared-training-badge")).to_have_text("shared training")

    page.get_by_role("link", name="Submit job").click()  # a LoRA job that cannot share: a two-device trainer
    _lora_form(page, "lora-two-devices")
    page.locator("input[name=devices]").fill("2")
    page.locator("select[name=training_share]").select_option("on")
    with page.expect_response(lambda r: _is_submit(r.request)) as answered:
        page.get_by_role("button", name="Submit job").click()
    assert answered.value.status == 422
    detail = answered.value.json()["detail"]
    assert [issue["loc"] for issue in detail] == [["body", "training", "share"]], detail
    error = field.locator(".field-error")
    expect(error).to_contain_text("cannot share a training process")
    expect(error).to_contain_text("multi-device trainer")
    expect(page.get_by_test_id("share-field").locator(".field-error")).to_have_count(0)  # not generation.share's
    expect(page).to_have_url(re.compile(r"#/submit$"))  # not submitted
    shot(page, "72-submit-training-share-refused")

    page.locator("select[name=lora]").select_option("off")  # full fine-tuning: the control and its choice go
    expect(field).to_have_count(0)
    page.locator("input[name=devices]").fill("1")
    with page.expect_request(_is_submit) as sent:
        page.get_by_role("button", name="Submit job").click()
    assert sent.value.post_data_json["training"]["share"] is False
    assert sent.value.post_data_json["training"]["lora"] is None
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    assert world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")["shared_training"] is False
    expect(page.get_by_test_id("kpi-iteration")).to_be_visible()
    expect(page.get_by_test_id("shared-training-badge")).to_have_count(0)


def test_a_shared_training_job_shows_the_shared_training_badge(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "train-share-badge")
    both = world.api.post("/jobs", json=spec("lora-both", training={"lora": {"rank": 8}, "share": True}))
    trainer = world.api.post("/jobs", json=spec("lora-trainer", training={"lora": {"rank": 8}, "share": True},
                                                generation={"share": False}))
    alone = world.api.post("/jobs", json=spec("lora-alone", training={"lora": {"rank": 8}}))
    assert (both["shared_training"], both["shared_generation"]) == (True, True)
    assert (trainer["shared_training"], trainer["shared_generation"]) == (True, False)
    assert (alone["shared_training"], alone["shared_generation"]) == (False, True)
    assert world.api.get(f"/jobs/{both['id']}")["shared_training"] is True

    open_signed_in(page, api_server, world.token, f"/jobs/{both['id']}")
    badge = page.get_by_test_id("kpi-iteration").get_by_test_id("shared-training-badge")
    expect(badge).to_have_text("shared training")
    expect(badge).to_have_attribute("title", TRAINING_TITLE)
    expect(page.get_by_test_id("shared-training-badge")).to_have_count(1)
    expect(page.get_by_test_id("kpi-instances").get_by_test_id("shared-badge")).to_have_text("shared instances")
    shot(page, "73-job-shared-training")

    page.get_by_role("link", name="← Jobs").click()
    table = page.get_by_test_id("jobs-table")
    row = table.get_by_test_id(f"run-{both['id']}")
    expect(row.get_by_test_id("shared-training-badge")).to_have_text("shared trainer")
    expect(row.get_by_test_id("shared-training-badge")).to_have_attribute("title", TRAINING_TITLE)
    expect(row.get_by_test_id("shared-badge")).to_have_count(1)  # both badges together
    row = table.get_by_test_id(f"run-{trainer['id']}")
    expect(row.get_by_test_id("shared-training-badge")).to_have_count(1)
    expect(row.get_by_test_id("shared-badge")).to_have_count(0)
    row = table.get_by_test_id(f"run-{alone['id']}")
    expect(row).to_be_visible()
    expect(row.get_by_test_id("shared-training-badge")).to_have_count(0)
    expect(row.get_by_test_id("shared-badge")).to_have_count(1)

    table.get_by_role("link", name="lora-trainer").click()  # not a second open_signed_in: it signs out at times
    expect(page).to_have_url(re.compile(rf"#/jobs/{trainer['id']}$"))
    expect(page.get_by_test_id("kpi-iteration").get_by_test_id("shared-training-badge")).to_be_visible()
    expect(page.get_by_test_id("shared-badge")).to_have_count(0)
