"""Agentic jobs in a browser: the grader bench (#/graders) scores a string_check and a multi grader and names the
field of an invalid spec; a stored multi-turn episode reads as a conversation with its tool call and tool result,
policy tokens apart from the environment's, and its turns beside its tokens; the submit form sends an environment
job (checked in the stored spec) and opens the grader bench pre-filled from its reward section."""

from __future__ import annotations

import json
import re

import pytest
from e2e_runs import finished_run, new_team, record
from e2e_support import Server, fill_name_and_arithmetic, open_signed_in, shot
from grader_models import build_digit_judge
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.job_data import record_samples

pytestmark = pytest.mark.e2e

STRING_CHECK_YAML = """type: string_check
name: exact
input: "{{ sample.output_text }}"
reference: "{{ item.answer }}"
operation: eq
"""
MULTI = {
    "type": "multi",
    "params": {
        "graders": {
            "exact": {"type": "string_check", "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}",
                      "operation": "eq"},
            "fuzzy": {"type": "text_similarity", "input": "{{ sample.output_text }}",
                      "reference": "{{ item.answer }}", "evaluation_metric": "fuzzy_match"},
        },
        "calculate_output": "0.5 * exact + 0.5 * fuzzy",
    },
}


def _run(page: Page, spec: str, output: str, item: str) -> None:
    panel = page.get_by_test_id("grader-panel")
    panel.locator("textarea[name=grader_spec]").fill(spec)
    panel.locator("textarea[name=grader_output]").fill(output)
    panel.locator("textarea[name=grader_item]").fill(item)
    panel.get_by_role("button", name="Run grader").click()


def test_grader_bench_scores_string_check_and_multi(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "graders")
    open_signed_in(page, api_server, world.token, "/jobs")
    page.get_by_role("link", name="Graders").click()  # reachable from the navigation
    expect(page).to_have_url(re.compile(r"#/graders$"))

    _run(page, STRING_CHECK_YAML, "42", '{"answer": "42"}')  # an OpenAI grader object, in YAML
    expect(page.get_by_test_id("grader-score")).to_have_text("1.0000")
    _run(page, STRING_CHECK_YAML, "41", '{"answer": "42"}')
    expect(page.get_by_test_id("grader-score")).to_have_text("0.0000")

    _run(page, json.dumps(MULTI, indent=2), "41", '{"answer": "42"}')  # 0.5 * 0 + 0.5 * fuzzy("41", "42") = 0.25
    expect(page.get_by_test_id("grader-score")).to_have_text("0.2500")
    subs = page.get_by_test_id("grader-subscores")
    expect(subs.locator("tbody tr", has_text="exact")).to_contain_text("0.0000")
    expect(subs.locator("tbody tr", has_text="fuzzy")).to_contain_text("0.5000")
    shot(page, "60-grader-bench")

    _run(page, json.dumps(MULTI), "41", '{"question": "6 * 7"}')  # the item lacks `answer`: a per-sample error
    expect(page.get_by_test_id("grader-error")).to_contain_text("item has no 'answer'")

    _run(page, STRING_CHECK_YAML.replace("operation: eq", "operation: contains"), "42", '{"answer": "42"}')
    spec_field = page.locator(".field", has=page.locator("textarea[name=grader_spec]"))
    expect(spec_field.locator(".field-error")).to_contain_text("param 'operation' must be one of")
    expect(page.get_by_test_id("grader-result")).to_have_count(0)

    _run(page, json.dumps({"type": "string_check", "params": {}, "weigth": 2}), "42", "{}")  # a typo: the field named
    expect(spec_field.locator(".field-error")).to_contain_text("grader.weigth")

    _run(page, STRING_CHECK_YAML, "42", "[1, 2]")  # an item that is not an object: named before anything is sent
    item_field = page.locator(".field", has=page.locator("textarea[name=grader_item]"))
    expect(item_field.locator(".field-error")).to_contain_text("the item must be an object")


def _episode_record() -> dict[str, object]:
    """A calculator episode of two policy turns as the runtime records it (workers/core/episode.py)."""
    from contract.sample import Sample
    from workers.core.episode import episode_record

    call = '<tool_call>{"name": "calculate", "arguments": {"expression": "6 * 7"}}</tool_call>'
    context, answer = "<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n", "It is 42."
    mask = [1] * 12 + [0] * 9 + [1] * 4
    sample = Sample(
        job_id=0, prompt_id="p0", group_id="g0", sample_id="s0", policy_version=1, prompt_ids=[1, 2, 3],
        response_ids=list(range(len(mask))), behaviour_logprobs=[0.0] * len(mask), finish_reason="stop",
        loss_mask=mask, turns=2, turn_spans=[[0, 12], [21, 25]], turn_rewards=[None, 1.0], episode_end="done",
        messages=[
            {"role": "system", "content": "Use the calculate tool, then reply with the final answer only."},
            {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0_0", "type": "function", "function": {"name": "calculate",
                                                                   "arguments": {"expression": "6 * 7"}}}]},
            {"role": "tool", "tool_call_id": "call_0_0", "name": "calculate", "content": "42"},
            {"role": "assistant", "content": answer},
        ],
        segments=[{"start": 0, "end": 12, "trained": True, "text": call},
                  {"start": 12, "end": 21, "trained": False, "text": context},
                  {"start": 21, "end": 25, "trained": True, "text": answer}],
    )
    episode = episode_record(sample)
    assert episode is not None
    return episode


def test_stored_episode_reads_as_a_conversation(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "episodes")
    job = finished_run(engine, world, "calc-agent", [0.2, 0.6], environment={"type": "calculator", "max_turns": 3})
    record(engine, job["id"], 3, {"reward_mean": 0.7, "turns_mean": 2.0, "turns_p90": 3.0, "turns_max": 3.0,
                                  "lengths": [25, 18, 40, 9], "turns": [2, 1, 3, 1]}, None)
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job["id"], samples=[
            {"iteration": 3, "sample_id": f"{job['id']}:3:0", "prompt": "What is 6 * 7?", "response": "...",
             "reward": 1.0, "length": 25, "policy_version": 2, "instance_id": "gen-0", "episode": _episode_record()},
            {"iteration": 3, "sample_id": f"{job['id']}:3:1", "prompt": "What is 2 + 2?", "response": "4",
             "reward": 1.0, "length": 18, "policy_version": 2, "instance_id": "gen-0",
             "episode": {**_episode_record(), "turns": 1}},
        ])

    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    turns = page.get_by_test_id("turns-histogram")  # the long-tail view: turns per episode beside tokens
    page.get_by_label("length scope").select_option("stored")  # the stored samples only
    expect(turns.get_by_test_id("turn-stats")).to_contain_text("max 2")  # the loaded samples: 2 and 1 turns
    expect(turns.get_by_test_id("turn-tokens").locator("tbody tr")).to_have_count(2)
    page.get_by_label("length scope").select_option("latest")  # the newest iteration's recorded turns and lengths
    expect(turns.get_by_test_id("turn-stats")).to_contain_text("max 3")
    rows = turns.get_by_test_id("turn-tokens").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td")).to_have_text(["1", "2", "14", "18"])  # 1 turn: 2 episodes, 13.5 / 18 tokens
    expect(rows.last.locator("td")).to_have_text(["3", "1", "40", "40"])
    expect(page.get_by_test_id("turns-chart")).to_be_visible()
    expect(page.get_by_test_id("truncated")).to_contain_text("max_episode_tokens 512")  # an episode's cut-off

    samples = page.get_by_test_id("samples")
    expect(samples.locator("thead")).to_contain_text("Turns")
    samples.locator("tbody tr", has_text="6 * 7").click()
    conversation = page.get_by_test_id("sample-detail").get_by_test_id("conversation")
    expect(conversation.locator("li")).to_have_count(5)
    expect(conversation.get_by_test_id("turn-system")).to_contain_text("Use the calculate tool")
    expect(conversation.get_by_test_id("turn-user")).to_contain_text("What is 6 * 7?")
    policy = conversation.get_by_test_id("turn-policy")
    expect(policy).to_have_count(2)
    expect(policy.first).to_contain_text("policy · turn 1")
    expect(policy.first.get_by_test_id("tool-call")).to_contain_text('calculate({"expression":"6 * 7"})')
    expect(conversation.get_by_test_id("turn-tool")).to_contain_text("tool result · calculate")
    expect(conversation.get_by_test_id("turn-tool")).to_contain_text("42")
    expect(policy.last).to_contain_text("It is 42.")
    expect(policy.last).to_contain_text("step reward 1.000")
    stats = page.get_by_test_id("episode-stats")
    expect(stats).to_contain_text("policy tokens 16 (trained)")
    expect(stats).to_contain_text("environment tokens 9 (context)")
    segments = page.get_by_test_id("segments")
    expect(segments.locator("[data-trained=false]")).to_have_count(1)
    expect(segments.locator("[data-trained=false]")).to_contain_text("<|im_start|>tool")
    expect(segments.locator("[data-trained=true]")).to_have_count(2)
    shot(page, "61-episode-conversation")
    page.get_by_test_id("sample-detail").get_by_role("link", name=re.compile("across iterations")).click()
    expect(page.get_by_test_id("side-columns")).to_contain_text("25 tokens in 2 turns")


def test_submit_form_sends_an_environment_job_and_tests_its_grader(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "envjob")
    open_signed_in(page, api_server, world.token, "/submit")
    page.locator("select[name=model]").select_option("tiny")  # models list by name: the team's "judge" comes first
    fill_name_and_arithmetic(page, "calc-episodes")

    # the reward section first: a string_check grader, tried on the grader bench from the form
    page.locator("input[name=reward]").fill("string_check")
    page.locator("textarea[name=reward_params]").fill(
        'input: "{{ sample.output_text }}"\nreference: "{{ item.answer }}"\noperation: ilike\n')
    page.get_by_role("button", name=re.compile("Test this grader")).click()
    expect(page).to_have_url(re.compile(r"#/graders\?spec="))
    expect(page.locator("textarea[name=grader_spec]")).to_have_value(re.compile('"operation": "ilike"'))
    _run(page, page.locator("textarea[name=grader_spec]").input_value(), "The answer is 42", '{"answer": "42"}')
    expect(page.get_by_test_id("grader-score")).to_have_text("1.0000")

    page.get_by_role("link", name="Submit job").click()
    fill_name_and_arithmetic(page, "calc-episodes")
    page.locator("select[name=environment]").select_option("calculator")
    fields = page.get_by_test_id("environment-fields")
    expect(page.locator("input[name=reward]")).to_have_count(0)  # an environment job has no separate reward
    fields.locator("input[name=max_turns]").fill("3")
    fields.locator("input[name=max_episode_tokens]").fill("256")
    fields.locator("textarea[name=environment_params]").fill("operands: [2")  # neither JSON nor YAML: named
    page.get_by_role("button", name="Submit job").click()
    expect(fields.locator(".field-error")).to_contain_text("neither JSON nor YAML")
    fields.locator("textarea[name=environment_params]").fill("operands: two")  # parses; the API's 422 names it
    page.get_by_role("button", name="Submit job").click()
    expect(fields.locator(".field-error")).to_contain_text("param 'operands' must be int")
    fields.locator("textarea[name=environment_params]").fill("operands: 2\nmax_operand: 9\n")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])

    spec = world.api.get(f"/jobs/{job_id}")["spec"]
    assert spec["name"] == "calc-episodes"
    assert spec["environment"] == {"type": "calculator", "params": {"operands": 2, "max_operand": 9}, "code": None,
                                   "max_turns": 3, "max_episode_tokens": 256, "step_timeout_s": 2.0,
                                   "memory_mb": 256, "grader": None, "episode_timeout_s": 600.0,
                                   "url": None, "requirements": []}
    assert spec["reward"]["type"] == "exact_match"  # the default: unset, as a spec with an environment must have it
    assert spec["dataset"]["builtin"] == "arithmetic"


JUDGE_PLUS_EXACT = """graders:
  judge:
    type: judge
    model: JUDGE
    input: [{role: user, content: "Grade 0-10: {{ sample.output_text }}"}]
    range: [0, 10]
    max_tokens: 1
  exact: {type: string_check, input: "{{ sample.output_text }}", reference: "{{ item.answer }}", operation: eq}
calculate_output: "exact + judge / 100"
"""


def test_submit_form_sends_a_tool_job_graded_by_a_judge_plus_string_multi(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "graded-env")
    judge_dir = build_digit_judge(api_server.data_dir / "artifacts" / "models" / f"judge-{world.tag}")
    world.api.post("/models", json={"name": "judge", "path": str(judge_dir)})
    open_signed_in(page, api_server, world.token, "/submit")
    page.locator("select[name=model]").select_option("tiny")  # models list by name: the team's "judge" comes first
    fill_name_and_arithmetic(page, "graded-episodes")
    page.locator("select[name=environment]").select_option("calculator")
    fields = page.get_by_test_id("environment-fields")
    expect(fields.locator("input[name=reward]")).to_have_count(0)  # the grader is off: the steps' rewards alone
    fields.locator("select[name=environment_grader]").select_option("on")
    fields.locator("input[name=reward]").fill("multi")
    fields.locator("textarea[name=reward_params]").fill(JUDGE_PLUS_EXACT.replace("JUDGE", "no-such-judge"))
    page.get_by_role("button", name="Submit job").click()  # the API's 422 names the judge's model, under params
    expect(fields.locator(".field-error")).to_contain_text("graders.judge.model")
    expect(fields.locator(".field-error")).to_contain_text("not registered")
    fields.locator("textarea[name=reward_params]").fill(JUDGE_PLUS_EXACT.replace("JUDGE", "judge"))
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    shot(page, "submit-graded-environment")

    spec = world.api.get(f"/jobs/{job_id}")["spec"]
    grader = spec["environment"]["grader"]
    assert spec["environment"]["type"] == "calculator" and grader["type"] == "multi"
    assert grader["params"]["calculate_output"] == "exact + judge / 100"
    assert grader["params"]["graders"]["judge"]["model"] == "judge"
    assert grader["params"]["graders"]["exact"]["operation"] == "eq"
    assert spec["reward"]["type"] == "exact_match"  # unset: the grader sits in the environment
