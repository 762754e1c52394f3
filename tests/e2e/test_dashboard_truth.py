"""What a user sees is true: no repeated words in badges and banners, no stale rate or badge, the live dot only while
live, readable scale markers, code shown as code, training signals and the cluster page; and the submit form's
defaults make a job that learns. Runs are written straight into the database (e2e_runs.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from e2e_runs import World, add_instances, finished_run, new_team, running_run
from e2e_support import REPO, Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import Iteration, Job
from backend.db.session import session_scope
from backend.services.job_data import record_iteration
from backend.services.jobs import record_event, transition_job

pytestmark = pytest.mark.e2e
CODE = 'def reward(prompt, response, meta):\n    return float(len(response) > {n})\n'


def _iterations(engine: Engine, job_id: int, rows: list[dict[str, Any]], ago_s: float = 0.0) -> None:
    with session_scope(engine) as session:
        for i, metrics in enumerate(rows, start=1):
            row = record_iteration(session=session, job_id=job_id, iteration=i, metrics=metrics)
            session.flush()
            moment = datetime.now(UTC) - timedelta(seconds=ago_s + 10 * (len(rows) - i))
            session.query(Iteration).filter(Iteration.id == row.id).update({"created_at": moment})


def _fail(engine: Engine, job_id: int, error: str) -> None:
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        transition_job(session=session, job=job, to=JobStatus.failed, error=error)


def test_failed_job_says_failed_once_and_its_dot_is_not_live(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "once")
    job = running_run(engine, world, "oom-run")
    _fail(engine, job["id"], "CUDA out of memory while training")
    open_signed_in(page, api_server, world.token, "/jobs")
    row = page.get_by_test_id(f"run-{job['id']}")
    expect(row.get_by_test_id("status")).to_have_text("failed")
    expect(row.get_by_test_id("health")).to_have_count(0)  # not "failed failed"
    page.goto(f"{api_server.url}/#/jobs/{job['id']}")
    heading = page.get_by_role("heading", name=re.compile("oom-run"))
    expect(heading.get_by_test_id("status")).to_have_text("failed")
    expect(heading.get_by_test_id("health")).to_have_count(0)
    expect(page.get_by_test_id("live-dot")).to_have_attribute("data-tone", "ended")
    expect(page.locator(".live-dot.on")).to_have_count(0)
    banner = page.get_by_test_id("health-banner")
    expect(banner).to_have_text("failed: CUDA out of memory while training")  # the error once, no "failed: failed"
    shot(page, "60-failed-once")


def test_stalled_job_shows_no_stale_rate_and_its_signals(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "stall")
    job = running_run(engine, world, "stalled-zero", generation={"instances": 1})
    add_instances(engine, job["id"], [("gen-0", InstanceStatus.running, True)])
    flat = {"reward_mean": 0.0, "reward_std": 0.0, "reward_flat_groups": 1.0, "truncated_fraction": 0.2,
            "samples_per_s": 12.5, "tokens_per_s": 400.0}
    _iterations(engine, job["id"], [flat] * 3, ago_s=400)
    with session_scope(engine) as session:
        started = datetime.now(UTC) - timedelta(seconds=500)
        session.query(Job).filter(Job.id == job["id"]).update({"started_at": started})
    open_signed_in(page, api_server, world.token, "/jobs")
    row = page.get_by_test_id(f"run-{job['id']}")
    expect(row.get_by_test_id("health")).to_have_text("stalled")
    expect(row.get_by_test_id("signal-chips")).to_contain_text("reward constant")
    page.goto(f"{api_server.url}/#/jobs/{job['id']}")
    banner = page.get_by_test_id("health-banner")
    expect(banner).to_contain_text(re.compile(r"^stalled: no iteration for \d+ s"))
    expect(banner).not_to_contain_text("stalled: stalled")
    expect(page.get_by_test_id("kpi-samples/s")).to_contain_text("–")  # not the last 12.5
    expect(page.get_by_test_id("kpi-samples/s")).to_contain_text("stalled")
    expect(page.get_by_test_id("signals").locator("[data-check=reward_constant]")).to_contain_text(
        "reward is constant within every group (0.000)")
    shot(page, "61-stalled-signals")


def test_resumed_job_never_shows_a_paused_badge(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "resume")
    job = running_run(engine, world, "pause-resume", generation={"instances": 1})
    add_instances(engine, job["id"], [("gen-0", InstanceStatus.running, True)])
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    heading = page.get_by_role("heading", name=re.compile("pause-resume"))
    expect(heading.get_by_test_id("health")).to_have_text("healthy")
    page.get_by_role("button", name="Pause").click()
    expect(heading.get_by_test_id("status")).to_have_text("paused")
    expect(heading.get_by_test_id("health")).to_have_count(0)  # the status says it; no "paused paused"
    page.get_by_role("button", name="Resume").click()
    expect(heading.get_by_test_id("status")).to_have_text("running")
    assert heading.get_by_test_id("health").all_inner_texts() in ([], ["healthy"])  # at once: never "paused"
    expect(heading.get_by_test_id("health")).to_have_text("healthy")
    shot(page, "62-resumed")


def test_many_scale_markers_keep_readable_labels(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "markers")
    job = finished_run(engine, world, "scaled-often", [0.1 * i for i in range(1, 9)])
    start = datetime.now(UTC) - timedelta(seconds=80)
    with session_scope(engine) as session:  # ten scale decisions within the first iterations
        for k in range(10):
            event = record_event(session=session, job_id=job["id"], kind="scale",
                                 message=f"target_instances {k + 2} -> {k + 3}", data={"target_instances": k + 3})
            event.created_at = start + timedelta(seconds=5 + 4 * k)
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    chart = page.locator(".card", has=page.get_by_role("heading", name="Throughput")).locator(".uplot")
    expect(chart).to_have_attribute("data-marker-labels", re.compile(r"\["))
    labels = json.loads(chart.get_attribute("data-marker-labels") or "[]")
    assert labels, "no marker label drawn"
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if a["row"] == b["row"]:
                assert a["x"] + a["width"] < b["x"] or b["x"] + b["width"] < a["x"], f"labels overlap: {a} {b}"
    assert all(len(label["text"]) <= 16 for label in labels)  # short labels: "manual 4→5", "3 changes"
    shot(page, "63-scale-markers")


def test_yaml_and_spec_diff_show_code_as_a_block(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "code")
    one = finished_run(engine, world, "code-a", [0.1, 0.2], reward={"type": "python", "code": CODE.format(n=3)})
    two = finished_run(engine, world, "code-b", [0.1, 0.3], reward={"type": "python", "code": CODE.format(n=5)})
    open_signed_in(page, api_server, world.token, f"/jobs/{one['id']}")
    page.get_by_role("button", name="YAML").click()
    yaml_text = page.get_by_test_id("spec-yaml").locator("pre")
    expect(yaml_text).to_contain_text("code: |\n    def reward(prompt, response, meta):\n        return float(")
    page.goto(f"{api_server.url}/#/compare?ids={one['id']},{two['id']}")
    cell = page.get_by_test_id("spec-diff").locator("tr[data-path='reward.code'] td").nth(1)
    expect(cell).to_contain_text("def reward(prompt, response, meta):")
    assert "\n    return float(len(response) > 3)" in cell.inner_text()  # a block, not "...\\n    return..."
    shot(page, "64-spec-diff-code")


def test_cluster_page_and_submit_warning(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "cluster")
    job = running_run(engine, world, "needs-workers", generation={"instances": 2})
    add_instances(engine, job["id"], [("gen-0", InstanceStatus.starting, False)])
    open_signed_in(page, api_server, world.token, "/cluster")
    expect(page.get_by_test_id("pools").locator("tr[data-pool=generation]")).to_contain_text("generation")
    expect(page.get_by_test_id("pending")).to_contain_text("needs-workers gen-0")
    expect(page.get_by_test_id("pending")).to_contain_text("no generation worker is registered")
    expect(page.get_by_test_id("no-workers")).to_be_visible()
    shot(page, "65-cluster")
    page.get_by_role("link", name="Submit job").click()
    expect(page.get_by_test_id("capacity-warning")).to_contain_text("No generation worker is registered")

    # a real generation worker (2 slots, pinned to device sets 0 and 1) registers with its resource samples
    env = {**api_server.env, "STREAMRL_DEVICE": "cpu", "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen([sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", "generation",
                               "--devices", "0;1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        page.locator("input[name=instances]").fill("3")
        expect(page.get_by_test_id("capacity-warning")).to_contain_text("The generation pool has 2 slot(s)",
                                                                        timeout=120_000)
        page.get_by_role("link", name="Cluster").click()
        card = page.locator("[data-testid^='worker-generation-']")
        expect(card).to_contain_text("0 of 2 slot(s) busy", timeout=60_000)
        expect(card).to_contain_text("device sets 0 ; 1")
        expect(card.locator(".uplot")).to_have_count(1, timeout=60_000)  # CPU/memory over time (two samples)
        expect(page.get_by_test_id("pools").locator("tr[data-pool=generation]")).to_contain_text("2")
        shot(page, "66-cluster-worker")
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)


def test_submit_form_defaults_make_a_job_that_learns(
    page: Page, api_server: Server, engine: Engine, tmp_path: Path
) -> None:
    """The form as it opens, submitted unchanged, then run (train-local, the platform's colocated iteration) on the
    freshly built tiny model: groups get different rewards from the first iterations and no check fires."""
    from backend.services.signals import History, check_history
    from contract.spec import JobSpec
    from workers.local.run import train_local

    world: World = new_team(api_server, "defaults")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    spec = world.api.get(f"/jobs/{job_id}")["spec"]
    world.api.post(f"/jobs/{job_id}/cancel")
    spec = {**spec, "model": str(api_server.tiny_model_dir),
            # fewer prompts per iteration keep the test short; model, task, reward, group size and lr are the form's
            "training": {**spec["training"], "iterations": 2, "prompts_per_iteration": 4},
            "checkpoint": {**spec["checkpoint"], "interval": 100}}
    result = train_local(JobSpec.model_validate(spec), tmp_path / "run", eval_every=1000)
    rows = [record.metrics for record in result.records]
    assert all(row["reward_flat_groups"] < 1.0 and row["reward_std"] > 0 for row in rows), rows
    rewards = [row["reward_mean"] for row in rows]
    history = History(newest=[(i + 1, m) for i, m in reversed(list(enumerate(rows)))], count=len(rows),
                      reward_min=min(rewards), reward_max=max(rewards), first_reward=rewards[0],
                      first_entropy=rows[0].get("entropy"))
    assert check_history(history, spec) == []
