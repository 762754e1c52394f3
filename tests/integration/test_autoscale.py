"""Elastic autoscaling end to end (issue 6): real jobs on the tiny model, real Celery workers, the controller loop.

- responses that grow: stop characters make the untrained model answer in ~3 characters and a reward proportional to
  the length teaches it to write up to max_tokens within ~10 iterations; generation (sequential decoding on one
  instance) becomes the bottleneck while training (one micro-step over 16 samples) stays cheap, and the autoscaler
  scales generation up; a second instance really starts;
- training-bound (one-token responses, 128 samples trained in one micro-batch on tiny-15m with a KL reference): it
  scales down and the surplus instance really stops.
Each decision is read back through `GET /api/v1/jobs/{id}/events` (kind `autoscale`, reason, numbers) and the
instance counts through `GET /api/v1/jobs/{id}`.

The specs leave `autoscale.hysteresis` / `threshold_s` at their defaults (3 agreeing iterations measured at the current
count, threshold 0); `cooldown_s` is set to 0 so the decision follows the third such iteration at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

pytestmark = [pytest.mark.integration]  # ~35 s on a loaded 2-core machine, platform start included

HYSTERESIS = 3  # AutoscaleSpec.hysteresis's default, which backend/controller/scaling.py passes to decide()


@pytest.fixture
def api(platform: Any) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with platform.backend.client() as client:
        yield client, platform.backend.auth_headers(platform.user, platform.team)


def _until(predicate: Callable[[], Any], timeout_s: float, what: str, platform: Any) -> Any:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; controller errors "
                         f"{platform.controller_errors[-3:]}\n{platform.logs_tail()}")


def _job(api: tuple[TestClient, dict[str, str]], job_id: int) -> dict[str, Any]:
    client, headers = api
    response = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _events(api: tuple[TestClient, dict[str, str]], job_id: int, kind: str) -> list[dict[str, Any]]:
    client, headers = api
    response = client.get(f"/api/v1/jobs/{job_id}/events", headers=headers, params={"limit": 1000})
    assert response.status_code == 200, response.text
    return [e for e in response.json()["data"] if e["kind"] == kind]


def _autoscale_events(api: tuple[TestClient, dict[str, str]], job_id: int) -> list[dict[str, Any]]:
    return _events(api, job_id, "autoscale")


def _messages(api: tuple[TestClient, dict[str, str]], job_id: int, kind: str) -> list[str]:
    return [e["message"] for e in _events(api, job_id, kind)]


def _cancel(api: tuple[TestClient, dict[str, str]], job_id: int) -> None:
    client, headers = api
    client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers)


def _iterations(api: tuple[TestClient, dict[str, str]], job_id: int) -> list[dict[str, Any]]:
    client, headers = api
    response = client.get(f"/api/v1/jobs/{job_id}/iterations", headers=headers)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


def _moment(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _show(rows: list[dict[str, Any]]) -> str:
    keys = ("gen_seconds", "train_seconds", "instances", "len_p50")
    return "\n".join(f"{r['iteration']}: " + " ".join(f"{k}={r['metrics'].get(k)!r:.6}" for k in keys) for r in rows)


# Responses end at any of these characters, so the untrained model answers in ~3 characters; a reward proportional
# to the length teaches it (lr 1e-2) to avoid them, and within ~10 iterations responses reach max_tokens.
STOP_CHARS = list("0123456789aeiou ABCDEFGHIJ")
LENGTH_REWARD = "def reward(prompt, response, meta):\n    return len(response) / 32.0\n"


def test_job_whose_responses_grow_is_scaled_up(platform: Any, api: Any) -> None:
    samples = 2 * 8  # prompts_per_iteration x group_size: trained in one micro-step, after generation ends
    job_id = platform.submit(
        mode="sync", dataset={"builtin": "long_tail", "num_prompts": 16, "eval_prompts": 0},
        reward={"type": "python", "code": LENGTH_REWARD}, algorithm={"group_size": 8},
        generation={"instances": 1, "batch_size": 6, "max_tokens": 128, "stop": STOP_CHARS},
        training={"iterations": 80, "prompts_per_iteration": 2, "micro_batch_size": samples, "lr": 1e-2},
        autoscale={"policy": "auto", "min_instances": 1, "max_instances": 2, "cooldown_s": 0})
    try:
        events = _until(lambda: _autoscale_events(api, job_id), 300, "an autoscale event", platform)
        rows = _iterations(api, job_id)
        print(_show(rows))
        up = events[0]
        numbers = up["data"]
        print(f"scale-up: {numbers}")
        assert numbers["from"] == 1 and numbers["to"] == 2, up
        assert "generation-bound" in numbers["reason"] and "generation-bound" in up["message"]
        assert numbers["instances"] == 1
        assert numbers["delta"] == pytest.approx(numbers["gen_seconds"] - numbers["train_seconds"])
        assert numbers["delta"] > numbers["save_up"] > 0
        decided_at = _moment(up["created_at"])
        before = [r["metrics"] for r in rows if _moment(r["created_at"]) <= decided_at]
        assert len(before) >= HYSTERESIS
        window = before[-HYSTERESIS:]
        assert all(m["instances"] == 1 for m in window)
        assert numbers["gen_seconds"] == pytest.approx(sum(m["gen_seconds"] for m in window) / HYSTERESIS)
        # the decision came once responses had grown (at the first lengths generation and training are balanced)
        first_len, decided_len = before[0]["len_p50"], window[-1]["len_p50"]
        assert decided_len >= 4 * first_len, f"scaled up while responses were short ({first_len} -> {decided_len})"
        _until(lambda: _job(api, job_id)["running_instances"] == 2, 180, "the second instance to run", platform)
        job = _job(api, job_id)
        assert job["target_instances"] == 2 and job["autoscale"] is True
        assert "starting instance gen-1" in _messages(api, job_id, "scale")
    finally:
        _cancel(api, job_id)


@pytest.fixture(scope="module")
def bigger_model(platform: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """tiny-15m: training (forward + backward + KL reference + Adam over the whole batch) clearly outweighs a
    one-token generation, which is mostly per-request overhead."""
    from backend.db import Model
    from workers.models import build_tiny_model

    path = build_tiny_model("tiny-15m", tmp_path_factory.mktemp("models") / "tiny-15m", seed=0)
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="tiny15", path=str(path), created_by_id=platform.user.id))
    return "tiny15"


def test_training_bound_job_is_scaled_down(platform: Any, api: Any, bigger_model: str) -> None:
    samples = 16 * 8
    job_id = platform.submit(
        model=bigger_model, mode="sync", dataset={"builtin": "arithmetic", "num_prompts": 64, "eval_prompts": 0},
        algorithm={"group_size": 8, "kl_coef": 0.05}, generation={"instances": 2, "batch_size": 128, "max_tokens": 1},
        training={"iterations": 60, "prompts_per_iteration": 16, "micro_batch_size": samples},
        autoscale={"policy": "auto", "min_instances": 1, "max_instances": 2, "cooldown_s": 0})
    try:
        _until(lambda: len(platform.iterations(job_id)) >= 6, 240, "six iterations", platform)
        print(_show(_iterations(api, job_id)))
        events = _until(lambda: _autoscale_events(api, job_id), 120, "an autoscale event", platform)
        down = events[0]
        assert down["data"]["from"] == 2 and down["data"]["to"] == 1, down
        assert "training-bound" in down["data"]["reason"]
        numbers = down["data"]
        assert numbers["instances"] == 2
        assert -numbers["delta"] > numbers["cost_down"] > 0
        _until(lambda: sorted(platform.statuses(job_id).values()) == ["running", "stopped"], 60,
               "the surplus instance to stop", platform)
        job = _job(api, job_id)
        assert job["target_instances"] == 1 and job["running_instances"] == 1
        assert "stopping instance gen-1" in _messages(api, job_id, "scale")
        print(f"scale-down: {numbers}")
    finally:
        _cancel(api, job_id)

