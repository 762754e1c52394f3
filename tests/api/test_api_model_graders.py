"""Model-backed graders through the API: jobs naming a `model` or `judge` grader are checked at submit (422 naming
the field: unknown model, not ready, wrong kind), and POST /graders/run scores them on the generation pool (here a
worker played in a thread by the real worker function; 503 when no generation worker is registered)."""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from grader_models import build_digit_judge, build_reward_model
from minimal_model import write_minimal_model
from sqlalchemy import update

from backend.db.models import Model
from backend.services import graders as grader_service
from workers.rewards.grader_run import answer

API = "/api/v1"
OUT = "{{ sample.output_text }}"
RUBRIC = [{"role": "user", "content": "Grade 0-10: {{ sample.output_text }} (reference {{ item.answer }})"}]


def _judge(model: str = "judge", **params: Any) -> dict[str, Any]:
    return {"type": "judge", "model": model, "input": RUBRIC, "range": [0, 10], **params}


def _multi(judge_model: str = "judge") -> dict[str, Any]:
    return {"type": "multi", "params": {"graders": {
        "judge": _judge(judge_model, max_tokens=1),
        "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
    }, "calculate_output": "0.5 * judge / 10 + 0.5 * exact"}}


def _register(client: TestClient, world: Any, name: str, directory: Path) -> None:
    target = world.backend.settings.artifacts / "models" / uuid.uuid4().hex  # under the shared models root
    shutil.copytree(directory, target)
    answer_ = client.post(f"{API}/models", json={"name": name, "path": str(target)}, headers=world.headers("member"))
    assert answer_.status_code == 201, answer_.text


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("api-grader-models")
    return {"rm": build_reward_model(root / "rm", zero_head=True), "judge": build_digit_judge(root / "judge")}


def _submit(client: TestClient, world: Any, reward: dict[str, Any] | None, model: str = "tiny",
            environment: dict[str, Any] | None = None) -> Any:
    spec = {"name": "graded", "model": model, "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            **({"reward": reward} if reward else {}), **({"environment": environment} if environment else {})}
    return client.post(f"{API}/jobs", json=spec, headers=world.headers("member"))


def _refused(answer_: Any) -> tuple[list[Any], str]:
    assert answer_.status_code == 422, answer_.text
    detail = answer_.json()["detail"][0]
    return detail["loc"], detail["msg"]


def test_submit_checks_every_model_a_grader_names(app_client: TestClient, world: Any) -> None:
    artifacts = world.backend.settings.artifacts / "models"
    for name, architecture in [("rm", "LlamaForSequenceClassification"), ("chat", "LlamaForCausalLM")]:
        path = write_minimal_model(artifacts / uuid.uuid4().hex, architecture=architecture)
        if name == "chat":  # a judge needs a chat template
            (path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
        created = app_client.post(f"{API}/models", json={"name": name, "path": str(path)},
                                  headers=world.headers("member"))
        assert created.status_code == 201, created.text
    accepted = _submit(app_client, world, _multi("chat"))
    assert accepted.status_code == 201, accepted.text
    assert _submit(app_client, world, {"type": "model", "params": {"model": "rm"}}).status_code == 201
    calculator = {"type": "calculator", "grader": _multi("chat")}  # an environment's grader of the final answer
    assert _submit(app_client, world, None, environment=calculator).status_code == 201
    loc, msg = _refused(_submit(app_client, world, None, environment={**calculator, "grader": _multi("nope")}))
    assert loc == ["body", "environment", "grader", "params", "graders", "judge", "model"], loc
    assert "'nope' is not registered" in msg
    loc, msg = _refused(_submit(app_client, world, _multi("chat"), environment=calculator))
    assert loc == ["body"] and "environment.grader" in msg, (loc, msg)

    loc, msg = _refused(_submit(app_client, world, _multi("nope")))
    assert loc == ["body", "reward", "params", "graders", "judge", "model"] and "'nope' is not registered" in msg
    loc, msg = _refused(_submit(app_client, world, _multi("rm")))
    assert loc[-1] == "model" and "not a chat model" in msg
    loc, msg = _refused(_submit(app_client, world, {"type": "composite", "components": [
        {"type": "model", "params": {"model": "chat"}}]}))
    assert loc == ["body", "reward", "components", 0, "params", "model"]
    assert "not a sequence-classification reward model" in msg
    loc, msg = _refused(_submit(app_client, world, {"type": "exact_match"}, model="rm"))
    assert loc == ["body", "model"] and "reward model, not a policy" in msg
    with world.backend.session() as session:
        session.execute(update(Model).where(Model.team_id == world.team.id, Model.name == "chat")
                        .values(state="downloading"))
    loc, msg = _refused(_submit(app_client, world, _multi("chat")))
    assert loc[-1] == "model" and "is downloading, not ready" in msg
    loc, msg = _refused(_submit(app_client, world, {"type": "judge", "params": {"model": "chat", "input": "x"}}))
    assert loc == ["body", "reward"] and "param 'input'" in msg


def test_graders_run_scores_model_graders_on_the_pool(app_client: TestClient, world: Any, built: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _register(app_client, world, "judge", built["judge"])
    _register(app_client, world, "rm", built["rm"])

    def run(grader: dict[str, Any], output: str, item: dict[str, Any]) -> Any:
        return app_client.post(f"{API}/graders/run", json={"grader": grader, "sample": {"output_text": output},
                                                            "item": item}, headers=world.headers("viewer"))

    monkeypatch.setattr(grader_service, "generation_workers", lambda client: 0)
    unavailable = run(_multi(), "4", {"answer": "4"})
    assert unavailable.status_code == 503 and "no generation worker" in unavailable.json()["detail"]

    def worker(client: redis.Redis, request_id: str, payload: dict[str, Any]) -> None:  # the Celery task's body
        threading.Thread(target=answer, args=(client, request_id, payload, "cpu"), daemon=True).start()

    monkeypatch.setattr(grader_service, "generation_workers", lambda client: 1)
    monkeypatch.setattr(grader_service, "send_grader_task", worker)
    body = run(_multi(), "4", {"answer": "4"}).json()
    assert body["error"] is None and body["sub_rewards"]["exact"] == 1.0
    assert body["sub_rewards"]["judge"] in (3.0, 7.0)  # the digit judge's only replies
    assert body["reward"] == pytest.approx(0.5 * body["sub_rewards"]["judge"] / 10 + 0.5)
    scored = run({"type": "model", "params": {"model": "rm", "transform": "sigmoid", "pass_threshold": 0.5}}, "x",
                 {}).json()
    assert scored == {"reward": 0.5, "sub_rewards": {}, "passed": True, "error": None}  # a zero head: sigmoid(0)
    out_of_range = {key: value for key, value in _judge(max_tokens=1, range=[8, 9]).items() if key != "type"}
    parse_error = run({"type": "judge", "params": out_of_range}, "4", {"answer": "4"}).json()
    assert parse_error["reward"] == 0.0 and parse_error["passed"] is None
    assert "outside range [8, 9]" in parse_error["error"]
    missing = run({"type": "model", "params": {"model": "judge"}}, "x", {})
    assert _refused(missing)[0] == ["body", "grader", "params", "model"]
