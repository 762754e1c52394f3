"""Charts that must tell the truth, in a browser: compare in wall-time mode shows every run's value on hover (runs
record iterations at different times), zooming one panel of a job zooms all its panels, and the chart controls (metric
picker, zero baseline, log scale, smoothing, x axis) change what is drawn."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from e2e_runs import World, finished_run, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Locator, Page, expect
from sqlalchemy import Engine

from backend.db.models import Iteration, Job
from backend.db.session import session_scope

pytestmark = pytest.mark.e2e


def _respace(engine: Engine, job_id: int, seconds: float) -> None:
    """Move the job's iteration rows to `seconds` apart (finished_run writes them 10 s apart)."""
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.started_at is not None
        for row in session.query(Iteration).filter(Iteration.job_id == job_id):
            row.created_at = job.started_at + timedelta(seconds=seconds * row.iteration)


@pytest.fixture(scope="module")
def runs(api_server: Server, engine: Engine) -> tuple[World, dict[str, dict]]:
    world = new_team(api_server, "charts")
    ten = finished_run(engine, world, "every-10s", [0.1, 0.3, 0.5, 0.7])  # x = 0, 10, 20, 30 s
    seven = finished_run(engine, world, "every-7s", [0.2, 0.4, 0.6, 0.8])
    _respace(engine, seven["id"], 7.0)  # x = 0, 7, 14, 21 s
    return world, {"ten": ten, "seven": seven}


def _legend_value(panel: Locator, series: int) -> Locator:
    return panel.locator(".u-legend .u-series").nth(series).locator(".u-value")


def test_compare_wall_time_hover_shows_every_run(
    page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]
) -> None:
    world, jobs = runs
    ids = f"{jobs['ten']['id']},{jobs['seven']['id']}"
    open_signed_in(page, api_server, world.token, f"/compare?ids={ids}&x=time&m=reward_mean")
    panel = page.get_by_test_id("panel-reward_mean")
    expect(panel.locator(".u-legend")).to_contain_text("every-7s")  # names loaded: the chart is final
    expect(panel.locator(".u-over")).to_be_visible()  # laid out (a loaded machine paints a moment later)
    box = panel.locator(".u-over").bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 7 / 30, y)  # 7 s: only every-7s has a point here (iteration 2)
    expect(_legend_value(panel, 2)).to_have_text("0.4")
    expect(_legend_value(panel, 1)).to_have_text("≈0.24")  # 0.1 at 0 s .. 0.3 at 10 s: was "--"
    page.mouse.move(box["x"] + box["width"] * 20 / 30, y)  # 20 s: every-10s's point, every-7s between 14 and 21 s
    expect(_legend_value(panel, 1)).to_have_text("0.5")
    expect(_legend_value(panel, 2)).to_have_text("≈0.771")
    shot(page, "50-compare-wall-time-hover")
    page.mouse.move(box["x"] + box["width"] - 1, y)  # 30 s: every-7s ended at 21 s, nothing to show for it
    expect(_legend_value(panel, 1)).to_have_text("0.7")
    expect(_legend_value(panel, 2)).to_have_text("--")


def test_zooming_one_job_panel_zooms_them_all(
    page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]
) -> None:
    world, jobs = runs
    open_signed_in(page, api_server, world.token, f"/jobs/{jobs['ten']['id']}")
    throughput = page.locator("section.card", has=page.get_by_role("heading", name="Throughput", exact=True))
    reward = page.locator("section.card", has=page.get_by_role("heading", name="Reward and KL", exact=True))
    expect(reward.locator("canvas")).to_have_count(1)
    expect(throughput.locator("canvas")).to_have_count(1)
    breakdown = page.locator("section.card", has=page.get_by_role("heading", name="Iteration time breakdown"))
    expect(breakdown.locator(".u-legend")).to_contain_text("reward / grader s")  # judges' and reward models' time
    over = reward.locator(".u-over")
    expect(over).to_be_visible()
    box = over.bounding_box()
    assert box is not None
    left_edge = (box["x"] + 2, box["y"] + box["height"] / 2)
    page.mouse.move(*left_edge)
    expect(_legend_value(reward, 1)).to_have_text("0.1")  # iteration 1 at the left edge

    expect(throughput.locator(".u-over")).to_be_visible()
    source = throughput.locator(".u-over").bounding_box()  # zoom the throughput panel to iterations ~3-4
    assert source is not None
    page.mouse.move(source["x"] + source["width"] * 0.6, source["y"] + 20)
    page.mouse.down()
    page.mouse.move(source["x"] + source["width"] * 0.95, source["y"] + 20, steps=5)
    page.mouse.up()
    page.mouse.move(*left_edge)
    expect(_legend_value(reward, 1)).to_have_text("0.5")  # the reward panel followed: its left edge is iteration 3
    shot(page, "51-job-zoom-shared")
    over.dblclick()  # a reset on any panel resets them all
    source_left = (source["x"] + 2, source["y"] + source["height"] / 2)
    page.mouse.move(*source_left)
    expect(_legend_value(throughput, 1)).to_have_text("11")  # samples/s of iteration 1: back to the full range
    page.mouse.move(*left_edge)
    expect(_legend_value(reward, 1)).to_have_text("0.1")


def _y_scale(card: Locator) -> dict:
    """The y range the card's chart drew (LineChart writes it on its root: the canvas has no text)."""
    root = card.locator(".uplot").first
    expect(root).to_have_attribute("data-y-scale", re.compile("scale"))
    return json.loads(root.get_attribute("data-y-scale") or "{}")


def test_chart_controls_switch_metric_smoothing_and_scale(
    page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]
) -> None:
    """The ETA and cost card of a finished run; one view for every chart of the job page: a metric picked from every
    recorded metric gets its panel; the zero baseline, the log scale and EMA smoothing change what the reward chart
    draws; x by samples seen; the same controls on Compare, kept in the URL."""
    world, jobs = runs
    open_signed_in(page, api_server, world.token, f"/jobs/{jobs['ten']['id']}")
    reward = page.locator("section.card", has=page.get_by_role("heading", name="Reward and KL", exact=True))
    expect(reward.locator("canvas")).to_have_count(1)
    assert _y_scale(reward)["min"] > 0.05  # auto range around 0.1-0.7
    expect(page.get_by_test_id("eta")).to_have_text("done")  # ETA and cost card (GET /jobs/{id}/eta)
    expect(page.get_by_test_id("cost-used")).to_contain_text("40.0 device-s")  # 4 iterations x 10 s x 1 trainer

    page.get_by_label("chart a metric").select_option("len_p99")  # any recorded metric (40 + iteration)
    panel = page.get_by_test_id("metric-panel-len_p99")
    expect(panel.locator(".u-legend")).to_contain_text("len_p99")
    assert 40 < _y_scale(panel)["min"] < 41.1

    page.get_by_label("zero baseline").check()
    expect(reward.locator(".uplot")).to_have_attribute("data-y-scale", re.compile(r'"min":0[,}]'))
    assert _y_scale(panel)["min"] == 0
    page.get_by_label("zero baseline").uncheck()
    page.get_by_label("log scale").check()
    expect(reward.locator(".uplot")).to_have_attribute("data-y-scale", re.compile('"scale":"log"'))
    assert _y_scale(reward)["min"] == pytest.approx(0.1) and _y_scale(reward)["max"] == pytest.approx(1)
    page.get_by_label("log scale").uncheck()

    page.get_by_label("smoothing").fill("0.5")
    expect(reward.locator(".u-legend")).to_contain_text("reward (EMA 0.5)")
    over = reward.locator(".u-over")
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    expect(_legend_value(reward, 1)).to_have_text("0.553")  # debiased EMA of 0.1, 0.3, 0.5, 0.7 (raw: 0.7)
    page.get_by_label("x axis").select_option("samples")
    expect(reward.locator(".u-legend")).to_contain_text("samples seen")
    assert "smooth=0.5" in page.url and "x=samples" in page.url and "m=len_p99" in page.url
    shot(page, "52-job-chart-controls")

    ids = f"{jobs['ten']['id']},{jobs['seven']['id']}"
    page.goto(f"{api_server.url}/#/compare?ids={ids}&m=reward_mean&zero=1&smooth=0.5")  # signed in: a hash change
    expect(page.get_by_test_id("compare")).to_be_visible()
    compared = page.get_by_test_id("panel-reward_mean")
    expect(compared.locator(".u-legend")).to_contain_text("every-7s (EMA 0.5)")
    expect(compared.locator(".uplot")).to_have_attribute("data-y-scale", re.compile(r'"min":0[,}]'))
    expect(page.get_by_label("zero baseline")).to_be_checked()


def test_a_flat_reward_is_drawn_flat(page: Page, api_server: Server, engine: Engine,
                                     runs: tuple[World, dict[str, dict]]) -> None:
    """A reward that stays within 0.30-0.32 (issue 39's LoRA run) is drawn on a y range of at least 0.2 (REWARD_MIN_SPAN
    in frontend/src/lib/chartView.ts), not auto-scaled to 0.30-0.32 where the wobble reads as a climb."""
    world, _ = runs
    flat = finished_run(engine, world, "flat", [0.30, 0.32, 0.31, 0.32])
    open_signed_in(page, api_server, world.token, f"/jobs/{flat['id']}")
    reward = page.locator("section.card", has=page.get_by_role("heading", name="Reward and KL", exact=True))
    expect(reward.locator("canvas")).to_have_count(1)
    drawn = _y_scale(reward)
    assert drawn["max"] - drawn["min"] == pytest.approx(0.2) and drawn["min"] < 0.3 and drawn["max"] > 0.32, drawn
