"""The job page charts grouped speculative decoding per iteration (draft acceptance, tokens per forward pass and the
tail phase's seconds) for a job that recorded them, and shows no such chart for one that did not; the submit form
sends the `generation.speculative` choice."""

from __future__ import annotations

import re

import pytest
from e2e_runs import finished_run, new_team
from e2e_support import Server, hover_chart_until, open_signed_in
from playwright.sync_api import Page, Request, expect
from sqlalchemy import Engine

from backend.db import Iteration
from backend.db.session import session_scope

pytestmark = pytest.mark.e2e


def test_speculation_chart_shows_acceptance_tokens_per_forward_and_tail(page: Page, api_server: Server,
                                                                        engine: Engine) -> None:
    world = new_team(api_server, "speculation")
    job = finished_run(engine, world, "spec-group", [0.2, 0.4, 0.6], generation={"speculative": "group"})
    figures = {1: (0.5, 1.8, 4.0), 2: (0.6, 2.1, 3.0), 3: (0.75, 2.5, 2.0)}
    with session_scope(engine) as session:  # what the recorder writes for a speculating job
        for row in session.query(Iteration).filter(Iteration.job_id == job["id"]):
            acceptance, per_forward, tail = figures[row.iteration]
            row.metrics = {**row.metrics, "spec_acceptance": acceptance, "tokens_per_forward": per_forward,
                           "tail_phase_seconds": tail}
    plain = finished_run(engine, world, "spec-off", [0.2, 0.4], generation={"speculative": "off"})

    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    chart_shows_iteration_1(page, "speculation-chart", {"draft acceptance": "0.5", "tokens per forward pass": "1.8",
                                                        "tail phase s": "4"})

    open_signed_in(page, api_server, world.token, f"/jobs/{plain['id']}")
    expect(page.get_by_role("heading", name="Throughput", exact=True)).to_be_visible()
    expect(page.get_by_test_id("speculation-chart")).to_have_count(0)


def chart_shows_iteration_1(page: Page, test_id: str, values: dict[str, str]) -> None:
    """The chart `test_id` draws one canvas whose legend has these series in this order and, hovered at its left
    edge, shows iteration 1's values for them."""
    chart = page.get_by_test_id(test_id)
    expect(chart.locator("canvas")).to_have_count(1)
    legend = chart.locator(".u-legend")
    for label in values:
        expect(legend).to_contain_text(label)
    shown = legend.locator(".u-series .u-value")

    def at_iteration_1() -> None:
        for index, value in enumerate(values.values(), start=1):
            expect(shown.nth(index)).to_have_text(value, timeout=2000)

    hover_chart_until(chart.locator(".u-over"), 2, at_iteration_1)


def _is_submit(request: Request) -> bool:
    return request.method == "POST" and request.url.endswith("/api/v1/jobs")


def test_submit_form_sends_the_speculative_choice(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "speculation-form")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    page.locator("input[name=name]").fill("spec-off")
    page.locator("select[name=dataset_source]").select_option("builtin")
    page.locator("select[name=builtin]").select_option("long_tail")
    speculative = page.locator("select[name=speculative]")
    expect(speculative).to_have_value("auto")
    speculative.select_option("off")
    with page.expect_request(_is_submit) as sent:
        page.get_by_role("button", name="Submit job").click()
    assert sent.value.post_data_json["generation"]["speculative"] == "off"
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")
    assert job["spec"]["generation"]["speculative"] == "off"


def test_distillation_chart_shows_reverse_and_top_k_kl(page: Page, api_server: Server, engine: Engine) -> None:
    """A distillation job's page charts the reverse KL on the sampled tokens and the teacher's top-k KL (what the
    recorder writes for algorithm distill with teacher_topk) beside the held-out reward."""
    world = new_team(api_server, "distill-chart")
    job = finished_run(engine, world, "distilled", [0.2, 0.4, 0.6])
    with session_scope(engine) as session:
        for row in session.query(Iteration).filter(Iteration.job_id == job["id"]):
            row.metrics = {**row.metrics, "reverse_kl": 6.0 - row.iteration, "topk_kl": 4.0 - row.iteration,
                           "eval_reward": 0.1 * row.iteration}
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    chart_shows_iteration_1(page, "distill-chart", {"reverse KL to the teacher": "5", "teacher top-k KL": "3",
                                                    "held-out reward": "0.1"})
