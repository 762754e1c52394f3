"""A job's checkpoints with evaluation suites in a browser: each checkpoint's suite mean, the best one's badge and its
`job:<id>@best` name, the evaluations table with a row's outputs and scores, and Evaluate queuing the job's suites on
a checkpoint (POST /evaluations; no worker here, so it stays queued)."""

from __future__ import annotations

import pytest
from e2e_runs import add_checkpoint, finished_run, new_team
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine, select

from backend.db.models import Checkpoint, Evaluation, Job
from backend.db.session import session_scope

pytestmark = pytest.mark.e2e
SUITE = {"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 2}, "reward": {"type": "exact_match"}}


def test_checkpoint_scores_best_badge_rows_and_evaluate(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "evals")
    job = finished_run(engine, world, "best-of", [0.1, 0.5, 0.2], evaluation=[SUITE],
                       checkpoint={"interval": 1, "keep": 1, "select": "best", "metric": "held/mean"})
    for it in (2, 3):
        add_checkpoint(engine, api_server, job["id"], it)
    with session_scope(engine) as session:
        team_id = session.get(Job, job["id"]).team_id  # type: ignore[union-attr]
        for it, mean in ((2, 0.75), (3, 0.25)):
            row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job["id"], Checkpoint.iteration == it))
            assert row is not None
            row.scores, row.best = {"held": {"mean": mean, "pass@1": mean, "pass@k": mean, "k": 1.0}}, it == 2
            session.add(Evaluation(team_id=team_id, job_id=job["id"], iteration=it, model=f"job:{job['id']}@{it}",
                                   model_dir=row.path, suite_name="held", suite=SUITE, status="succeeded",
                                   summary={"mean": mean, "pass@1": mean, "pass@k": mean, "k": 1.0, "prompts": 2.0,
                                            "samples": 2.0},
                                   rows={"rows": [{"prompt_id": "p-1", "prompt": "What is 2 + 2?", "answer": "4",
                                                   "outputs": ["4"], "scores": [1.0]}]}))

    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    checkpoints = page.get_by_test_id("checkpoints")
    expect(checkpoints.get_by_test_id("best-checkpoint")).to_have_count(1)
    best = checkpoints.locator("li", has=page.get_by_test_id("best-checkpoint"))
    expect(best).to_contain_text("iteration 2")
    expect(best).to_contain_text("held 0.7500")
    expect(page.get_by_text(f"job:{job['id']}@best")).to_be_visible()
    table = page.get_by_test_id("evaluations")
    expect(table.locator("tbody tr")).to_have_count(2)
    table.locator("tbody tr", has_text="0.7500").click()
    expect(page.get_by_test_id("evaluation-rows")).to_contain_text("What is 2 + 2?")
    shot(page, "60-checkpoints-evaluations")

    checkpoints.locator("li", has_text="iteration 3").locator("[data-action=evaluate]").click()
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table.locator("tbody tr").first).to_contain_text("queued")


def test_compare_ranks_runs_by_a_suite(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "rank")
    low = finished_run(engine, world, "low", [0.1, 0.2], evaluation=[SUITE])
    high = finished_run(engine, world, "high", [0.1, 0.2], evaluation=[SUITE])
    for job, it, scores in ((low, 2, {"held": {"mean": 0.3}, "other": {"mean": 0.9}}),
                            (high, 2, {"held": {"mean": 0.8, "pass@1": 0.7, "pass@k": 0.95}, "other": {"mean": 0.1}})):
        add_checkpoint(engine, api_server, job["id"], it)
        with session_scope(engine) as session:
            row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job["id"], Checkpoint.iteration == it))
            assert row is not None
            row.scores = scores
    open_signed_in(page, api_server, world.token, f"/compare?ids={low['id']},{high['id']}")
    ranking = page.get_by_test_id("suite-ranking")
    expect(ranking.locator("tbody tr").first).to_contain_text("high")
    expect(ranking.locator("tbody tr").first).to_contain_text("0.9500")
    page.get_by_label("rank by suite").select_option("other")
    expect(ranking.locator("tbody tr").first).to_contain_text("low")
    shot(page, "61-compare-ranked-by-suite")
