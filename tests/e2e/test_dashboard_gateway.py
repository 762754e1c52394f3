"""Gateway jobs in a browser, without a worker: the submit form shows the agent's fields for environment 'gateway'
(code with its starting template, requirements one per line and episodes per jail, or a service's URL; concurrency
and timeout), shows the API's 422 on the agent field it names, and sends the agent (checked in the stored spec); a
stored gateway episode reads in the sample browser as its agent calls, each with its tool calls, trained tokens and
version."""

from __future__ import annotations

import re

import pytest
from e2e_runs import finished_run, new_team
from e2e_support import Server, fill_name_and_arithmetic, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.job_data import record_samples
from contract.sample import Sample
from workers.core.episode import episode_record, mask_segments

pytestmark = pytest.mark.e2e


def test_submit_form_sends_a_gateway_agent(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "gwform")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    fill_name_and_arithmetic(page, "my-agent")
    page.locator("select[name=environment]").select_option("gateway")
    agent = page.get_by_test_id("agent-fields")
    expect(agent.locator("textarea[name=agent_code]")).to_have_value(re.compile(r"def run\(task, base_url, api_key\):"))
    expect(page.locator("textarea[name=environment_params]")).to_have_count(0)  # a gateway takes no params

    agent.locator("select[name=agent_where]").select_option("url")
    agent.locator("input[name=agent_url]").fill("ftp://agents.example.com")  # the API's 422, on the URL field
    page.get_by_role("button", name="Submit job").click()
    expect(agent.locator(".field-error")).to_contain_text("http(s)")

    agent.locator("select[name=agent_where]").select_option("code")
    agent.locator("textarea[name=agent_code]").fill("def run(task, base_url, api_key):\n    return 1.0\n")
    agent.locator("textarea[name=agent_requirements]").fill("")
    agent.locator("input[name=agent_concurrency]").fill("3")
    agent.locator("input[name=agent_timeout_s]").fill("45")
    agent.locator("input[name=agent_episodes_per_jail]").fill("8")
    shot(page, "70-gateway-agent-form")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    spec = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")["spec"]
    assert spec["environment"]["type"] == "gateway" and spec["environment"]["params"] == {}
    assert spec["agent"] == {"code": "def run(task, base_url, api_key):\n    return 1.0\n", "requirements": [],
                             "url": None, "concurrency": 3, "timeout_s": 45.0, "memory_mb": 2048,
                             "episodes_per_jail": 8, "retries": 2}


def _gateway_episode() -> dict[str, object]:
    """Two recorded calls of an agent (a tool call, then the answer) as workers/core/gateway.py stores them."""
    mask = [1] * 10 + [0] * 6 + [1] * 3
    sample = Sample(
        job_id=0, prompt_id="p0", group_id="g0", sample_id="s0", policy_version=4, prompt_ids=[1, 2],
        response_ids=list(range(len(mask))), behaviour_logprobs=[-0.5] * len(mask), finish_reason="stop",
        loss_mask=mask, turns=2, turn_spans=[[0, 10], [16, 19]], turn_rewards=[None, 1.0], turn_versions=[4, 5],
        episode_end="done", messages=[
            {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": '{"a":6,"b":7}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "42"},
        ],
        segments=[{**run, "text": f"tokens {run['start']}"} for run in mask_segments(mask)],
    )
    record = episode_record(sample)
    assert record is not None
    return record


def test_a_gateway_episode_reads_as_its_calls(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "gwcalls")
    job = finished_run(engine, world, "agent-run", [0.5], mode="sync", environment={"type": "gateway"},
                       agent={"url": "http://127.0.0.1:9/agent"})
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job["id"], samples=[
            {"iteration": 1, "sample_id": f"{job['id']}:1:0", "prompt": "What is 6 * 7?", "response": "42",
             "reward": 1.0, "length": 19, "policy_version": 4, "instance_id": "gen-0", "episode": _gateway_episode()}])
    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    page.get_by_test_id("samples").locator("tbody tr", has_text="6 * 7").click()
    detail = page.get_by_test_id("sample-detail")
    expect(detail.get_by_test_id("episode-stats")).to_contain_text("2 agent calls")
    calls = detail.get_by_test_id("turn-policy")
    expect(calls).to_have_count(2)
    expect(calls.first).to_contain_text("policy · call 1")
    expect(calls.first.get_by_test_id("tool-call")).to_contain_text('multiply({"a":6,"b":7})')
    expect(calls.first.get_by_test_id("turn-tokens")).to_have_text("10 tokens trained")
    expect(calls.first.get_by_test_id("turn-version")).to_have_text("policy v4")
    expect(calls.last.get_by_test_id("turn-tokens")).to_have_text("3 tokens trained · 6 context tokens before it")
    expect(calls.last.get_by_test_id("turn-version")).to_have_text("policy v5")
    expect(detail.get_by_test_id("turn-tool")).to_contain_text("42")
    expect(detail.get_by_test_id("segments").locator("[data-trained=false]")).to_have_count(1)
    shot(page, "71-gateway-episode-calls")
