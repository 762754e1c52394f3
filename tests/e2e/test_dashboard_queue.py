"""The cluster page's queue in a browser: a job held by its team's quota shows its position, what it waits for and
the team's own job holding it, and the queue grouped by team and priority (the controller's scheduling pass run
here, the same function the reconcile loop calls)."""

from __future__ import annotations

import pytest
import redis
from e2e_runs import new_team, spec
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.admission import schedule_pass
from contract import keys

pytestmark = pytest.mark.e2e


def test_cluster_page_shows_the_queue_and_why(page: Page, api_server: Server, engine: Engine,
                                              redis_url: str) -> None:
    world = new_team(api_server, "queue")
    assert world.api.http.patch("/teams/current/quotas", json={"max_concurrent_jobs": 1}).status_code == 200
    holder = world.api.post("/jobs", json=spec(f"holder-{world.tag}"))
    waiter = world.api.post("/jobs", json=spec(f"waiter-{world.tag}", priority="low"))
    client = redis.Redis.from_url(redis_url)
    try:
        with session_scope(engine) as session:
            schedule_pass(session=session, client=client)
        open_signed_in(page, api_server, world.token, "/cluster")
        items = page.get_by_test_id("queue-items")
        row = items.locator("tbody tr").filter(has_text=f"waiter-{world.tag}")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("quota:max concurrent jobs")
        expect(row).to_contain_text(f"held by your jobs #{holder['id']} 'holder-{world.tag}'")
        group = page.get_by_test_id("queue-groups").locator("tr[data-team=own][data-priority=low]")
        expect(group.locator("td")).to_have_text([f"queue-{world.tag}", "low", "1", "1", "2"])
        assert world.api.get(f"/jobs/{waiter['id']}")["queue"]["waiting_for"] == "quota:max_concurrent_jobs"
        shot(page, "22-cluster-queue")
        open_signed_in(page, api_server, world.token, f"/jobs/{waiter['id']}")  # the job page says it too
        banner = page.get_by_test_id("job-queue")
        expect(banner).to_contain_text("position")
        expect(banner).to_contain_text("quota:max_concurrent_jobs")
        expect(banner).to_contain_text(f"'holder-{world.tag}'")
        expect(page.locator(".job-detail .page-head")).to_contain_text("priority low")
    finally:
        client.delete(keys.scheduler_queue())
        client.close()
