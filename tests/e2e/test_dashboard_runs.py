"""Runs table, compare view, health, exports, clone and roles in a browser, on runs written straight into the
database (finished, broken and stalled runs need no runtime here; see e2e_runs.py)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from e2e_runs import World, add_checkpoint, add_instances, finished_run, new_team, record, running_run
from e2e_support import Server, invited_member, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.enums import InstanceStatus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def runs(api_server: Server, engine: Engine) -> tuple[World, dict[str, dict]]:
    """One team, two finished runs that differ in learning rate (one learns faster), a one-iteration run."""
    world = new_team(api_server, "runs")
    fast = finished_run(engine, world, "lr-high", [0.1, 0.3, 0.5, 0.7], training={"lr": 3e-4})
    slow = finished_run(engine, world, "lr-low", [0.1, 0.15, 0.2, 0.25], training={"lr": 1e-5})
    single = finished_run(engine, world, "one-point", [0.4])
    return world, {"fast": fast, "slow": slow, "single": single}


def test_compare_two_finished_runs(page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]) -> None:
    world, jobs = runs
    api_calls: list[str] = []
    page.on("request", lambda request: api_calls.append(request.url) if "/api/v1/" in request.url else None)
    open_signed_in(page, api_server, world.token, "/jobs")
    table = page.get_by_test_id("jobs-table")
    expect(table.get_by_test_id(f"run-{jobs['fast']['id']}")).to_contain_text("0.700")  # latest reward column
    table.get_by_role("columnheader", name=re.compile("^Reward")).click()  # sort by reward, best first
    expect(table.locator("tbody tr").first).to_contain_text("lr-high")
    per_job = [url for url in api_calls if re.search(r"/api/v1/jobs/\d+", url)]
    assert not per_job and any("/api/v1/runs" in url for url in api_calls), api_calls  # one request, not one per job
    page.get_by_label("select lr-high", exact=True).check()  # not "lr-high-clone" (clone test)
    page.get_by_label("select lr-low", exact=True).check()
    shot(page, "40-runs-table")
    page.get_by_role("button", name="Compare (2)").click()

    expect(page).to_have_url(re.compile(rf"compare\?ids={jobs['fast']['id']},{jobs['slow']['id']}"))
    panel = page.get_by_test_id("panel-reward_mean")
    expect(panel.locator("canvas")).to_have_count(1)
    expect(panel.locator(".u-legend")).to_contain_text("lr-high")
    expect(panel.locator(".u-legend")).to_contain_text("lr-low")
    expect(panel.locator(".u-over")).to_be_visible()
    box = panel.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)  # hover the last iteration
    expect(panel.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text("0.7")
    expect(panel.locator(".u-legend .u-series").nth(2).locator(".u-value")).to_have_text("0.25")
    summary = page.get_by_test_id("summary")  # why one learned faster: the same reward, reached sooner
    expect(summary.locator("thead")).to_contain_text("Reached 0.250 at")
    expect(summary.locator("tbody tr").nth(0)).to_contain_text("iteration 2")
    expect(summary.locator("tbody tr").nth(1)).to_contain_text("iteration 4")
    diff = page.get_by_test_id("spec-diff")
    expect(diff.locator("tr.differs[data-path='training.lr']")).to_contain_text("0.0003")
    expect(diff.locator("tr[data-path='generation.top_p']")).to_have_count(0)  # same in both: hidden
    shot(page, "41-compare")

    shared = page.url  # the URL alone reproduces the view
    page.goto("about:blank")
    page.goto(shared)
    expect(page.get_by_test_id("run-chip")).to_have_count(2)
    expect(page.get_by_test_id("spec-diff").locator("tr.differs[data-path='training.lr']")).to_be_visible()


def test_one_point_chart_and_zoom(page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]) -> None:
    world, jobs = runs
    ids = f"{jobs['single']['id']},{jobs['fast']['id']}"
    open_signed_in(page, api_server, world.token, f"/compare?ids={ids}&m=reward_mean")
    panel = page.get_by_test_id("panel-reward_mean")
    expect(panel.locator(".u-legend")).to_contain_text("one-point")  # names loaded: the chart is final
    expect(panel.locator(".u-legend")).to_contain_text("lr-high")
    over = panel.locator(".u-over")
    expect(over).to_be_visible()
    box = over.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    expect(panel.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text("0.4")  # the single point
    fast = panel.locator(".u-legend .u-series").nth(2).locator(".u-value")
    left_edge = (box["x"] + 2, box["y"] + box["height"] / 2)
    expect(fast).to_have_text("0.1")  # iteration 1 at the left edge
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.95, box["y"] + 20, steps=5)
    page.mouse.up()
    page.mouse.move(*left_edge)
    expect(fast).to_have_text("0.5")  # zoomed to iterations ~3-4: the left edge is now iteration 3
    over.dblclick()
    page.mouse.move(*left_edge)
    expect(fast).to_have_text("0.1")  # reset to the full range


def test_exports_match_the_api_and_checkpoint_loads(
    page: Page, api_server: Server, engine: Engine, runs: tuple[World, dict[str, dict]], tmp_path: Path
) -> None:
    world, jobs = runs
    job_id = jobs["fast"]["id"]
    add_checkpoint(engine, api_server, job_id, 4)
    open_signed_in(page, api_server, world.token, f"/jobs/{job_id}")
    exports = page.get_by_test_id("exports")
    with page.expect_download() as info:
        exports.get_by_role("button", name="Metrics CSV").click()
    rows = list(csv.DictReader(Path(info.value.path()).read_text().splitlines()))
    api_rows = world.api.get(f"/jobs/{job_id}/iterations")["data"]
    assert [(int(r["iteration"]), float(r["reward_mean"])) for r in rows] == [
        (r["iteration"], r["metrics"]["reward_mean"]) for r in api_rows]
    assert info.value.suggested_filename == f"job-{job_id}-metrics.csv"
    with page.expect_download() as info:
        exports.get_by_role("button", name="Events JSONL").click()
    kinds = [json.loads(line)["kind"] for line in Path(info.value.path()).read_text().splitlines()]
    assert kinds[0] == "created" and kinds.count("iteration") == 4

    with page.expect_download() as info:
        page.get_by_test_id("checkpoints").get_by_role("button", name="download").click()
    with tarfile.open(info.value.path()) as archive:
        archive.extractall(tmp_path / "ui", filter="data")
    page.get_by_label("timeline scope").select_option("all")  # the whole job, not the last 2 minutes
    whole = page.get_by_test_id("whole-timeline")
    expect(whole.locator(".timeline-canvas .lane-label")).to_have_text(["trainer", "gen-0"])
    expect(whole).to_contain_text("40.0 s of 40 s")
    expect(whole.get_by_test_id("time-axis").locator("span")).to_have_count(6)
    whole.get_by_role("button", name="zoom in").click()
    expect(whole).to_contain_text("20.0 s of 40 s")
    shot(page, "42-job-exports")
    cli_out = tmp_path / "cli" / "ckpt"
    cli = subprocess.run(
        [sys.executable, "-m", "streamrl.cli.main", "--url", api_server.url, "--token", world.token,
         "checkpoints", "download", str(job_id), "--out", str(cli_out)],
        capture_output=True, text=True, timeout=120, env=api_server.env,
    )
    assert cli.returncode == 0, cli.stderr
    assert "iteration 4" in cli.stdout
    from transformers import AutoModelForCausalLM

    for directory in (tmp_path / "ui" / f"job-{job_id}-iter-4", cli_out):
        model = AutoModelForCausalLM.from_pretrained(directory)
        assert sum(p.numel() for p in model.parameters()) > 0


def test_broken_reward_and_pending_instance_show_in_list_and_page(
    page: Page, api_server: Server, engine: Engine
) -> None:
    world = new_team(api_server, "health")
    broken = running_run(engine, world, "broken-reward", generation={"instances": 1})
    add_instances(engine, broken["id"], [("gen-0", InstanceStatus.running, True)])
    record(engine, broken["id"], 1, {"reward_mean": 0.0, "reward_errors": 16.0},
           ("reward_error", "reward 'python' failed: NameError: name 'answr' is not defined"))
    stuck = running_run(engine, world, "one-pending", generation={"instances": 3})
    running, starting = InstanceStatus.running, InstanceStatus.starting
    add_instances(engine, stuck["id"], [("gen-0", running, True), ("gen-1", running, True), ("gen-2", starting, False)])
    open_signed_in(page, api_server, world.token, "/jobs")
    table = page.get_by_test_id("jobs-table")
    expect(table.get_by_test_id(f"run-{broken['id']}").get_by_test_id("health")).to_have_text("reward errors")
    expect(table.get_by_test_id(f"run-{broken['id']}")).to_contain_text("NameError")
    expect(table.get_by_test_id(f"run-{stuck['id']}").get_by_test_id("health")).to_have_text("waiting for instances")
    shot(page, "43-runs-health")

    page.goto(f"{api_server.url}/#/jobs/{broken['id']}")
    banner = page.get_by_test_id("health-banner")
    expect(banner).to_contain_text("16 reward errors in the latest iteration")
    expect(banner).to_contain_text("NameError: name 'answr' is not defined")
    expect(page.get_by_test_id("reward-errors-chart").locator("canvas")).to_have_count(1)
    shot(page, "44-job-broken-reward")
    record(engine, broken["id"], 2, {"reward_mean": 0.0, "reward_errors": 16.0}, ("worker", "instance gen-1 started"))
    expect(page.get_by_test_id("events")).to_contain_text("instance gen-1 started")  # unpublished: found by polling

    page.goto(f"{api_server.url}/#/jobs/{stuck['id']}")
    expect(page.get_by_test_id("kpi-instances")).to_contain_text("2 / 3")  # not "3 / 3": one never started
    expect(page.get_by_test_id("kpi-instances")).to_contain_text("1 pending")
    expect(page.get_by_test_id("running-instances")).to_have_text("2")  # the scaling panel agrees
    expect(page.get_by_test_id("health-banner")).to_contain_text("2 of 3 instances running, 1 pending")
    shot(page, "45-job-pending-instance")


def test_clone_round_trip_and_yaml(page: Page, api_server: Server, runs: tuple[World, dict[str, dict]]) -> None:
    world, jobs = runs
    source = jobs["fast"]
    open_signed_in(page, api_server, world.token, f"/jobs/{source['id']}")
    expect(page.get_by_role("button", name="Chat", exact=True)).to_be_visible()  # a member's (a viewer has none)
    expect(page.get_by_role("link", name="Playground", exact=True)).to_be_visible()
    page.get_by_role("button", name="YAML").click()
    yaml_text = page.get_by_test_id("spec-yaml").locator("pre")
    expect(yaml_text).to_contain_text("lr: 0.0003")
    assert yaml.safe_load(yaml_text.inner_text()) == source["spec"]  # what `streamrl jobs submit` accepts
    page.get_by_role("button", name="Clone").click()
    expect(page.get_by_test_id("clone-banner")).to_contain_text(f"#{source['id']}")
    expect(page.locator("input[name=name]")).to_have_value("lr-high-clone")
    expect(page.locator("input[name=lr]")).to_have_value("0.0003")
    shot(page, "46-clone-form")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("heading", name=re.compile("lr-high-clone"))).to_be_visible()
    clone_id = int(page.url.rsplit("/", 1)[1])
    clone = world.api.get(f"/jobs/{clone_id}")
    assert clone["spec"] == {**source["spec"], "name": "lr-high-clone"}


def test_viewer_is_offered_no_submit(
    page: Page, api_server: Server, engine: Engine, runs: tuple[World, dict[str, dict]]
) -> None:
    world, jobs = runs
    add_checkpoint(engine, api_server, jobs["single"]["id"], 1)
    viewer, token = invited_member(api_server.url, world.api, f"viewer-{world.tag}@example.com", "viewer")
    open_signed_in(page, api_server, token, "/jobs")
    expect(page.get_by_test_id("jobs-table")).to_contain_text("lr-high")
    expect(page.get_by_role("link", name="New job")).to_have_count(0)
    expect(page.get_by_role("link", name="Submit job")).to_have_count(0)
    page.goto(f"{api_server.url}/#/jobs/{jobs['fast']['id']}")
    expect(page.get_by_role("button", name="YAML")).to_be_visible()
    expect(page.get_by_role("button", name="Clone")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(page.get_by_role("button", name="Chat", exact=True)).to_have_count(0)  # chat completions need member
    expect(page.get_by_role("link", name="Playground", exact=True)).to_have_count(0)
    # a checkpoint offers a viewer its download only: chat, evaluate, promote and fork need member (they would 403)
    page.goto(f"{api_server.url}/#/jobs/{jobs['single']['id']}")
    checkpoints = page.get_by_test_id("checkpoints")
    expect(checkpoints.get_by_role("button", name="download")).to_be_visible()
    expect(checkpoints.locator("[data-action=chat]")).to_have_count(0)
    expect(checkpoints.get_by_role("button", name=re.compile("fork", re.I))).to_have_count(0)
    page.goto(f"{api_server.url}/#/submit")
    expect(page.get_by_test_id("needs-member")).to_contain_text("member role")
    shot(page, "47-viewer-no-submit")
    viewer.http.close()
