"""POST /graders/run scores a pasted sample with a grader spec (OpenAI's graders/run); jobs accept grader rewards,
and an invalid grader spec is a 422 naming the field, at the test endpoint and at job submit."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"
OUT = "{{ sample.output_text }}"
MULTI = {"type": "multi", "params": {
    "graders": {
        "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
        "close": {"type": "text_similarity", "input": OUT, "reference": "{{ item.answer }}",
                  "evaluation_metric": "fuzzy_match"},
    },
    "calculate_output": "0.25 * exact + 0.75 * close",
}}


def _run(client: TestClient, world: Any, grader: dict[str, Any], output: str, item: dict[str, Any]) -> Any:
    return client.post(f"{API}/graders/run", json={"grader": grader, "sample": {"output_text": output}, "item": item},
                       headers=world.headers("viewer"))


def test_run_multi_gives_score_and_sub_scores(app_client: TestClient, world: Any) -> None:
    answer = _run(app_client, world, MULTI, "kitten", {"answer": "sitting"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # exact: 0; close: rapidfuzz ratio 8/13 (LCS "ittn" of 6 + 7 characters)
    assert body["sub_rewards"] == {"exact": 0.0, "close": pytest.approx(8 / 13)}
    assert body["reward"] == pytest.approx(0.75 * 8 / 13) and body["error"] is None and body["passed"] is None


def test_pass_threshold_and_sample_errors(app_client: TestClient, world: Any) -> None:
    grader = {"type": "text_similarity", "params": {"input": OUT, "reference": "{{ item.answer }}",
                                                    "evaluation_metric": "bleu", "pass_threshold": 0.9}}
    same = "the quick brown fox jumps over the lazy dog"
    passed = _run(app_client, world, grader, same, {"answer": same}).json()
    assert passed["reward"] == pytest.approx(1.0) and passed["passed"] is True
    failed = _run(app_client, world, grader, "a slow red fox", {"answer": same}).json()
    assert failed["reward"] < 0.9 and failed["passed"] is False
    missing = _run(app_client, world, grader, same, {"other": 1})
    assert missing.status_code == 200
    assert missing.json()["error"] == "item has no 'answer' (needed by the grader's template)"
    assert missing.json()["reward"] == 0.0


def test_invalid_specs_are_422_naming_the_field(app_client: TestClient, world: Any) -> None:
    bad = {"type": "multi", "params": {**MULTI["params"], "calculate_output": "__import__('os').getcwd()"}}
    answer = _run(app_client, world, bad, "x", {})
    assert answer.status_code == 422
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "grader"] and "calculate_output" in detail["msg"]
    python = {"type": "python", "code": "def reward(p, r, m):\n    return 1.0\n"}
    assert "sandboxed workers" in _run(app_client, world, python, "x", {}).json()["detail"][0]["msg"]
    unauthenticated = app_client.post(f"{API}/graders/run", json={"grader": MULTI, "sample": {"output_text": "x"}})
    assert unauthenticated.status_code == 401


def test_jobs_take_grader_rewards_and_refuse_bad_ones(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, reward=MULTI)
    assert job["spec"]["reward"]["type"] == "multi"
    bad = {"type": "string_check", "params": {"input": OUT, "reference": "{{ item.answer }}", "operation": "regex"}}
    answer = app_client.post(f"{API}/jobs", json={"name": "bad", "model": "tiny", "reward": bad,
                                                  "dataset": {"builtin": "arithmetic", "num_prompts": 8}},
                             headers=world.headers("member"))
    assert answer.status_code == 422
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "reward"] and "param 'operation'" in detail["msg"]
