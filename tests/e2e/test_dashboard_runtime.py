"""A real job on the tiny model, run by the real runtime (controller + generation and training Celery workers),
watched in the browser: the job page's charts fill in live, without a reload; and the playground answering from a
checkpoint through on-demand inference on a real generation worker. Starts the runtime the same way
`streamrl up` does (`streamrl controller`, `streamrl worker --pool generation|training`); skipped until those
commands exist."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_runs import end_unfinished_jobs
from e2e_support import ARTIFACTS, PASSWORD, REPO, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from waiting import stop_process_groups, wait_until


def _runtime_installed() -> bool:
    from streamrl.cli.main import command_names

    return {"controller", "worker"} <= command_names()


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.skipif(
        not _runtime_installed(),
        reason="the runtime is not installed yet (`streamrl controller` / `streamrl worker` commands missing)",
    ),
]


@pytest.fixture
def runtime(api_server: Server, pg_url: str) -> Iterator[None]:
    """The controller and one worker per pool, started on a database whose earlier jobs are all finished: the fake
    'running' and queued runs of the other browser tests would otherwise be restarted and admitted first, holding
    the only training slot while this test's job waits in 'starting'."""
    from backend.db.session import make_engine

    engine = make_engine(pg_url)
    try:
        end_unfinished_jobs(engine)
    finally:
        engine.dispose()
    env = {**api_server.env, "STREAMRL_URL": api_server.url}
    argvs = {
        "controller": ["controller"],
        "worker-generation": ["worker", "--pool", "generation"],
        "worker-training": ["worker", "--pool", "training"],
    }
    processes = []
    for name, args in argvs.items():
        log = (ARTIFACTS / f"{name}.log").open("wb")
        argv = [sys.executable, "-m", "streamrl.cli.main", *args]
        processes.append(
            (
                subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
                log,
            )
        )
    try:
        yield
    finally:
        stop_process_groups([process for process, _ in processes])  # the groups: Celery's pool children go too
        for _, log in processes:
            log.close()


def test_real_job_updates_live(page: Page, api_server: Server, make_api: MakeApi, runtime: None) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"gale-{tag}@example.com", PASSWORD, f"team-runtime-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    job = api.post(
        "/jobs",
        json={
            "name": "runtime-live",
            "model": "tiny-1m",
            "dataset": {"builtin": "arithmetic", "num_prompts": 32, "eval_prompts": 0},
            "algorithm": {"group_size": 2},
            "generation": {"instances": 1, "batch_size": 8, "max_tokens": 8},
            "training": {"iterations": 3, "prompts_per_iteration": 4, "micro_batch_size": 8},
            "checkpoint": {"interval": 100},
        },
    )
    open_signed_in(page, api_server, session["token"], f"/jobs/{job['id']}")
    expect(page.get_by_role("heading", name=re.compile("runtime-live"))).to_be_visible()
    page.evaluate("() => { window.__noReload = true; }")

    expect(page.get_by_test_id("status").first).to_have_text(re.compile("running|succeeded"), timeout=120_000)
    expect(page.get_by_test_id("kpi-iteration")).to_contain_text(re.compile("[1-9]"), timeout=180_000)
    expect(page.get_by_test_id("kpi-samples/s")).not_to_contain_text("–")
    expect(page.get_by_test_id("samples")).not_to_contain_text(" 0 samples")
    shot(page, "40-runtime-job-live")
    expect(page.get_by_test_id("status").first).to_have_text("succeeded", timeout=240_000)
    expect(page.get_by_test_id("checkpoints")).to_contain_text("iteration 3")  # the final checkpoint
    assert page.evaluate("() => window.__noReload === true"), "the page reloaded"
    shot(page, "41-runtime-job-done")


@pytest.fixture
def generation_worker(api_server: Server) -> Iterator[None]:
    """One generation worker (`streamrl worker --pool generation`), registered: on-demand inference needs nothing
    else."""
    import redis

    from backend.services.inference import generation_workers

    env = {**api_server.env, "STREAMRL_URL": api_server.url, "STREAMRL_INFERENCE_IDLE_S": "20"}
    log = (ARTIFACTS / "worker-generation-playground.log").open("wb")
    argv = [sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", "generation"]
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = redis.Redis.from_url(env["STREAMRL_REDIS_URL"])
    try:
        wait_until(lambda: generation_workers(client) > 0 or process.poll() is not None, 180, "the generation worker")
        assert process.poll() is None, f"the worker exited; see {ARTIFACTS / 'worker-generation-playground.log'}"
        yield
    finally:
        client.close()
        stop_process_groups([process])
        log.close()


def test_playground_answers_from_a_checkpoint(page: Page, api_server: Server, pg_url: str,
                                              generation_worker: None) -> None:
    """A checkpoint's Chat link opens the playground with `job:<id>@<iteration>`; side by side with `job:<id>@last`
    (the same checkpoint), both answer greedily the same text through /openai/v1 on the session's token, with token
    counts and per-token logprobs."""
    from e2e_runs import finished_run, new_team

    from backend.db.session import make_engine, session_scope
    from backend.services.job_data import record_checkpoint
    from workers.models.tiny import build_tiny_model

    world = new_team(api_server, "playground")
    engine = make_engine(pg_url)
    try:
        job = finished_run(engine, world, "chatty", [0.2, 0.4])
        target = Path(api_server.env["STREAMRL_ARTIFACT_DIR"]) / "checkpoints" / f"job-{job['id']}" / "iter-2"
        build_tiny_model("chat-qwen2-1m", target)  # a chat model: the playground renders with its chat template
        with session_scope(engine) as session:
            record_checkpoint(session=session, job_id=job["id"], iteration=2, path=str(target))
    finally:
        engine.dispose()
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    page.get_by_test_id("checkpoints").locator("[data-action=chat]").click()
    expect(page.get_by_label("model", exact=True)).to_have_value(f"job:{job['id']}@2")
    page.get_by_label("side by side").check()
    page.get_by_label("second model").fill(f"job:{job['id']}@last")
    page.get_by_label("temperature").fill("0")
    page.get_by_label("max_tokens").fill("6")
    page.get_by_label("message").fill("12+35=")
    page.get_by_role("button", name="Send").click()
    first, second = page.get_by_test_id("reply-0-0"), page.get_by_test_id("reply-1-0")
    counts = re.compile(r"\d+ prompt \+ [1-6] completion tokens")
    for reply in (first, second):
        expect(reply.get_by_test_id("reply-stats")).to_contain_text(counts, timeout=120_000)
    expect(first.locator(".tok").first).to_have_attribute("data-logprob", re.compile(r"^-?\d"))
    assert first.get_by_test_id("reply-text").inner_text() == second.get_by_test_id("reply-text").inner_text()
    shot(page, "53-playground-side-by-side")
