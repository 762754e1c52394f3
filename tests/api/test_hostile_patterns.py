"""Issue 36, finding 2: user regular expressions run on RE2 (linear time) at POST /graders/run: `(a+)+$` on
"a" * 30 + "!" answers at once while /health keeps answering (Python's `re` held the GIL for minutes), and patterns
RE2 cannot run are a 422 naming the field, at the test bench and at job submit."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

API = "/api/v1"
EVIL = "a" * 30 + "!"


def test_backtracking_pattern_answers_while_health_stays_up(live_server: str, world: Any) -> None:
    grader = {"type": "regex", "params": {"pattern": "(a+)+$", "score_miss": -1.0}}
    answers: list[httpx.Response] = []

    def run() -> None:  # four at once, as the probe that took the API down for 18 s
        answers.append(httpx.post(f"{live_server}{API}/graders/run", headers=world.headers("viewer"), timeout=30,
                                  json={"grader": grader, "sample": {"output_text": EVIL}, "item": {}}))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    health = [httpx.get(f"{live_server}{API}/health", timeout=10) for _ in range(3)]
    for thread in threads:
        thread.join(timeout=60)
    assert [h.status_code for h in health] == [200, 200, 200]
    assert len(answers) == 4, "a graders/run request did not answer"
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["reward"] == -1.0 and answer.json()["error"] is None


@pytest.mark.parametrize(("pattern", "named"), [(r"(\w)\1", "backreferences"), ("x(?=y)", "lookahead")])
def test_unsupported_patterns_are_422_naming_the_field(app_client: TestClient, world: Any, pattern: str,
                                                       named: str) -> None:
    grader = {"type": "regex", "params": {"pattern": pattern}}
    answer = app_client.post(f"{API}/graders/run", headers=world.headers("viewer"),
                             json={"grader": grader, "sample": {"output_text": "xy"}, "item": {}})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["body", "grader"] and "param 'pattern'" in detail["msg"] and named in detail["msg"]
    submit = app_client.post(f"{API}/jobs", headers=world.headers("member"), json={
        "name": "re", "model": "tiny", "reward": grader, "dataset": {"builtin": "arithmetic", "num_prompts": 8}})
    assert submit.status_code == 422, submit.text
    detail = submit.json()["detail"][0]
    assert detail["loc"] == ["body", "reward"] and "RE2" in detail["msg"] and named in detail["msg"]
