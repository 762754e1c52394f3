"""Live job page: charts and panels update over SSE without a reload, fed through the real iteration/event path
the runtime uses (backend.services.job_data.record_* into Postgres + backend.services.live.publish_live on Redis)."""

from __future__ import annotations

import re
import time
import uuid

import pytest
import redis
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e




def iteration_metrics(i: int) -> dict[str, float]:
    return {
        "samples_per_s": 10.0 + i,
        "tokens_per_s": 640.0 + 64 * i,
        "reward_mean": 0.1 * i,
        "kl": 0.01 * i,
        "staleness_mean": 0.5,
        "skew_p99_p50": 6.0,
        "len_p99": 120.0,
        "gen_seconds": 2.0,
        "train_seconds": 1.0,
        "trainer_idle_seconds": 0.5,
    }


def feed_iteration(server: Server, job_id: int, i: int, t0: float) -> None:
    """What the trainer does at the end of iteration i: record it, then publish it live."""
    from backend.db.session import make_engine, session_scope
    from backend.services.job_data import record_iteration, record_samples, record_spans
    from backend.services.live import publish_live

    metrics = iteration_metrics(i)
    # 8 short responses and 2 long ones per iteration: a long tail for the histogram.
    samples = [
        {
            "sample_id": f"{i}-{k}",
            "iteration": i,
            "prompt": f"{k}+{i}=",
            "response": "x" * (200 if k >= 8 else 10 + k),
            "reward": float(k % 2),
            "length": 200 if k >= 8 else 10 + k,
            "policy_version": i - 1,
            "instance_id": f"gen-{k % 2}",
        }
        for k in range(10)
    ]
    spans = [
        {"lane": "gen-0", "kind": "generating", "start": t0 + 3 * i, "end": t0 + 3 * i + 2},
        {"lane": "gen-1", "kind": "generating", "start": t0 + 3 * i, "end": t0 + 3 * i + 1},
        {"lane": "gen-1", "kind": "idle", "start": t0 + 3 * i + 1, "end": t0 + 3 * i + 2},
        {"lane": "trainer", "kind": "idle", "start": t0 + 3 * i, "end": t0 + 3 * i + 2},
        {"lane": "trainer", "kind": "training", "start": t0 + 3 * i + 2, "end": t0 + 3 * i + 3},
    ]
    engine = make_engine(server.env["STREAMRL_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            row = record_iteration(session=session, job_id=job_id, iteration=i, metrics=metrics)
            record_samples(session=session, job_id=job_id, samples=samples)
            record_spans(session=session, job_id=job_id, spans=spans)
            created_at = row.created_at.isoformat() if row.created_at else None
    finally:
        engine.dispose()
    client = redis.Redis.from_url(server.env["STREAMRL_REDIS_URL"])
    try:
        publish_live(client, job_id, "metrics", {"iteration": i, "metrics": metrics, "created_at": created_at})
        publish_live(client, job_id, "samples", samples)
        publish_live(client, job_id, "timeline", {"spans": spans})
    finally:
        client.close()


def _start(server: Server, job_id: int) -> None:
    from backend.db.enums import JobStatus
    from backend.db.models import Job
    from backend.db.session import make_engine, session_scope
    from backend.services.jobs import transition_job

    engine = make_engine(server.env["STREAMRL_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            job = session.get(Job, job_id)
            assert job is not None
            transition_job(session=session, job=job, to=JobStatus.starting)
            transition_job(session=session, job=job, to=JobStatus.running)
    finally:
        engine.dispose()


def test_live_charts_update_without_reload(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"carol-{tag}@example.com", PASSWORD, f"team-live-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    job = api.post(
        "/jobs",
        json={
            "name": "live-view",
            "model": "tiny-1m",
            "dataset": {"builtin": "arithmetic", "num_prompts": 32},
            "training": {"iterations": 5},
        },
    )
    _start(api_server, job["id"])  # iterations come from a running job (a queued one shows no rate)
    try:
        open_signed_in(page, api_server, session["token"], f"/jobs/{job['id']}")
        expect(page.get_by_role("heading", name=re.compile("live-view"))).to_be_visible()
        expect(page.locator(".live-dot.on")).to_be_visible()  # SSE connected
        page.evaluate("() => { window.__noReload = true; }")
        expect(page.get_by_test_id("kpi-samples/s")).to_contain_text("–")

        t0 = time.time() - 30
        feed_iteration(api_server, job["id"], 1, t0)
        expect(page.get_by_test_id("kpi-samples/s")).to_contain_text("11.0")
        expect(page.get_by_test_id("length-stats")).to_contain_text("skew")
        expect(page.get_by_test_id("timeline").locator(".lane-label", has_text="trainer")).to_be_visible()
        expect(page.locator(".uplot").first).to_be_visible()

        feed_iteration(api_server, job["id"], 2, t0)
        expect(page.get_by_test_id("kpi-samples/s")).to_contain_text("12.0")
        expect(page.get_by_test_id("kpi-iteration")).to_contain_text("2")
        expect(page.get_by_test_id("samples")).to_contain_text("20 samples")
        expect(page.get_by_test_id("length-stats")).to_contain_text("tail")
        assert page.evaluate("() => window.__noReload === true"), "the page reloaded"
        shot(page, "10-job-live")
    finally:  # nothing may run this job later (the runtime test starts a controller on the same database)
        api.post(f"/jobs/{job['id']}/cancel")
