"""The Team page's usage card in a browser: this month's use by job and by API key, the daily chart, and the team's
monthly budget set by an admin (usage recorded through the service the runtime calls)."""

from __future__ import annotations

import pytest
from e2e_runs import new_team, spec
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.job_data import record_iteration

pytestmark = pytest.mark.e2e


def test_team_page_shows_usage_and_sets_the_budget(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "usage")
    job = world.api.post("/jobs", json=spec(f"metered-{world.tag}"))
    with session_scope(engine) as session:  # 3 iterations of 600 s: 1 training device and 2 instances each
        for it in (1, 2, 3):
            record_iteration(session=session, job_id=job["id"], iteration=it, metrics={
                "iteration_seconds": 600.0, "instances_live": 2, "tokens_generated": 1000.0,
                "tokens_trained": 2500.0})
    open_signed_in(page, api_server, world.token, "/team")

    card = page.get_by_test_id("usage")
    by_job = card.get_by_test_id("usage-by-job")
    row = by_job.locator("tbody tr").filter(has_text=f"metered-{world.tag}")
    expect(row).to_have_count(1)
    expect(row.locator("td")).to_have_text([f"#{job['id']} metered-{world.tag}", "1.00", "0.50", "3,000", "7,500"])
    expect(card.get_by_test_id("usage-by-key")).to_contain_text("sessions (no API key)")
    expect(card.locator("canvas").first).to_be_visible()  # the daily chart
    expect(card.get_by_test_id("usage-budget")).to_contain_text("1.500 device-hours (no monthly budget)")

    card.locator("input[name=max_device_hours_per_month]").fill("1.2")  # under what was used: over budget
    card.get_by_role("button", name="Save budget").click()
    expect(card.get_by_test_id("usage-budget")).to_contain_text("1.500 of 1.2 device-hours (125%")
    assert world.api.get("/teams/current")["quotas"]["max_device_hours_per_month"] == 1.2
    refused = world.api.http.post("/jobs", json=spec(f"more-{world.tag}"))
    assert refused.status_code == 403 and refused.json()["budget"] == "max_device_hours_per_month"
    shot(page, "21-team-usage")


def test_a_job_paused_at_its_limit_says_so_and_its_limit_is_raised_on_the_job_page(
        page: Page, api_server: Server, engine: Engine, redis_url: str) -> None:
    import redis

    from backend.controller.budgets import enforce_budgets
    from backend.db.enums import JobStatus
    from backend.db.models import Job

    world = new_team(api_server, "limits")
    job = world.api.post("/jobs", json=spec(f"capped-{world.tag}", limits={"max_device_seconds": 100}))
    with session_scope(engine) as session:  # it ran 2 iterations of 30 device-seconds each... and 2 more: 120 > 100
        row = session.get(Job, job["id"])
        assert row is not None
        row.status = JobStatus.running
        for it in (1, 2, 3, 4):
            record_iteration(session=session, job_id=job["id"], iteration=it,
                             metrics={"iteration_seconds": 10.0, "instances_live": 2, "tokens_generated": 10.0,
                                      "tokens_trained": 30.0})
    client = redis.Redis.from_url(redis_url)
    with session_scope(engine) as session:
        assert job["id"] in enforce_budgets(session, client)[0]  # the controller's pass pauses it
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")

    card = page.get_by_test_id("job-limits")
    expect(card.get_by_test_id("budget-paused")).to_contain_text("limits.max_device_seconds")
    expect(card).to_contain_text("Device-seconds used: 120.0 of 100 (120%)")
    expect(card).to_contain_text("Tokens used (generated + trained): 160 (no limit)")
    card.locator("input[name=max_device_seconds]").fill("500")
    card.get_by_role("button", name="Save limits").click()
    expect(card).to_contain_text("saved")
    assert world.api.get(f"/jobs/{job['id']}")["spec"]["limits"] == {"max_device_seconds": 500.0, "max_tokens": None}
    with session_scope(engine) as session:
        assert job["id"] in enforce_budgets(session, client)[1]  # ... and the next pass resumes it
    client.close()
    expect(card.get_by_test_id("budget-paused")).to_have_count(0)  # the live events say it resumed
    shot(page, "22-job-limits")
