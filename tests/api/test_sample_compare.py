"""The same prompt's samples side by side: GET /samples/prompts lists what several runs (or iterations) answered,
GET /samples/by-prompt groups one prompt's samples by run and iteration with checkpoints marked; another team's job
is 404 and bad parameters are 422."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from backend.services.job_data import record_checkpoint, record_samples

API = "/api/v1"
PROMPT = "What is 12 + 30?"


def _sample(job_id: int, iteration: int, k: int, prompt: str, reward: float, error: str | None = None) -> dict:
    return {"iteration": iteration, "sample_id": f"{job_id}:{iteration}:{k}:{prompt[:8]}", "prompt": prompt,
            "response": f"answer {iteration}.{k}", "reward": reward, "length": 3 + k, "policy_version": iteration - 1,
            "instance_id": "gen-0", "reward_error": error}


def _seed(world: Any, client: TestClient) -> tuple[int, int]:
    a = world.submit(client, name="run-a")["id"]
    b = world.submit(client, name="run-b")["id"]
    with world.backend.session() as session:
        record_samples(session=session, job_id=a, samples=[
            _sample(a, 1, 0, PROMPT, 0.0), _sample(a, 1, 1, PROMPT, 1.0), _sample(a, 3, 0, PROMPT, 1.0),
            _sample(a, 3, 1, PROMPT, 0.0, error="NameError"), _sample(a, 1, 2, "Only in a", 0.5),
        ])
        record_samples(session=session, job_id=b, samples=[_sample(b, 2, 0, PROMPT, 0.5), _sample(b, 2, 1, "2+2=", 1)])
        record_checkpoint(session=session, job_id=a, iteration=3, path="/tmp/ckpt-a-3")
    return a, b


def test_prompts_shared_by_runs_come_first(app_client: TestClient, world: Any) -> None:
    a, b = _seed(world, app_client)
    answer = app_client.get(f"{API}/samples/prompts", params={"job_ids": f"{a},{b}"}, headers=world.headers("viewer"))
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert page["count"] == 3
    assert page["data"][0] == {"prompt": PROMPT, "runs": 2, "iterations": 3, "samples": 5}
    assert {row["prompt"] for row in page["data"][1:]} == {"Only in a", "2+2="}
    found = app_client.get(f"{API}/samples/prompts", params={"job_ids": f"{a},{b}", "q": "ONLY"},
                           headers=world.headers("viewer")).json()
    assert [row["prompt"] for row in found["data"]] == ["Only in a"] and found["count"] == 1


def test_one_prompt_by_run_and_iteration(app_client: TestClient, world: Any) -> None:
    a, b = _seed(world, app_client)
    answer = app_client.get(f"{API}/samples/by-prompt", params={"job_ids": f"{b},{a},{b}", "prompt": PROMPT},
                            headers=world.headers("viewer"))
    assert answer.status_code == 200, answer.text
    side = answer.json()
    assert side["prompt"] == PROMPT and side["count"] == 5
    assert [(run["job_id"], run["name"]) for run in side["runs"]] == [(b, "run-b"), (a, "run-a")]  # as asked
    run_a = side["runs"][1]
    assert [(it["iteration"], it["checkpoint"], it["reward_mean"]) for it in run_a["iterations"]] == [
        (1, False, 0.5), (3, True, 1.0)]  # the reward error is left out of the mean
    assert [s["response"] for s in run_a["iterations"][0]["samples"]] == ["answer 1.0", "answer 1.1"]
    assert run_a["iterations"][1]["samples"][1]["reward_error"] == "NameError"
    assert [it["iteration"] for it in side["runs"][0]["iterations"]] == [2]
    none = app_client.get(f"{API}/samples/by-prompt", params={"job_ids": str(a), "prompt": "never asked"},
                          headers=world.headers("viewer")).json()
    assert none["count"] == 0 and none["runs"] == [{"job_id": a, "name": "run-a", "iterations": []}]


def test_other_teams_jobs_are_404_and_bad_parameters_422(
    app_client: TestClient, world: Any, other_world: Any
) -> None:
    a, _ = _seed(world, app_client)
    theirs = other_world.submit(app_client, name="theirs")["id"]
    with other_world.backend.session() as session:
        record_samples(session=session, job_id=theirs, samples=[_sample(theirs, 1, 0, PROMPT, 1.0)])
    headers = world.headers("viewer")
    for path, extra in (("prompts", {}), ("by-prompt", {"prompt": PROMPT})):
        mixed = app_client.get(f"{API}/samples/{path}", params={"job_ids": f"{a},{theirs}", **extra}, headers=headers)
        assert mixed.status_code == 404 and mixed.json()["detail"] == f"job {theirs} not found"
        none = app_client.get(f"{API}/samples/{path}", params=extra, headers=headers)
        assert none.status_code == 422 and none.json()["detail"][0]["loc"] == ["query", "job_ids"]
        for wrong in (",".join(map(str, range(1, 10))), "x", "3,,7", "0", "9999999999"):
            bad = app_client.get(f"{API}/samples/{path}", params={"job_ids": wrong, **extra}, headers=headers)
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "job_ids"], wrong
    no_prompt = app_client.get(f"{API}/samples/by-prompt", params={"job_ids": str(a)}, headers=headers)
    assert no_prompt.status_code == 422 and no_prompt.json()["detail"][0]["loc"] == ["query", "prompt"]
    assert app_client.get(f"{API}/samples/prompts", params={"job_ids": str(a)}).status_code == 401
