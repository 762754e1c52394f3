"""The rollout gateway's keyed base URL, `/rollouts/{episode}/key/{token}/v1` (backend/api/routes/rollouts.py): the
episode token in the path, for a client that cannot send it as its key (a served verifiers env's model client sends
its own process's key as the bearer). The real API (TestClient, its lifespan's asyncio Redis client) on real Redis;
the test plays the generation instance (it pops the call and answers it), as workers/runtime/gateway.py does."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from typing import Any

import pytest
import redis

from backend.api.routes.rollouts import KeyRedaction
from contract import gateway as keys


def _episode(client: redis.Redis, state: str = "claimed") -> tuple[str, str, int]:
    episode, token, job = f"ep-{uuid.uuid4().hex[:12]}", keys.new_token(), 900_000 + uuid.uuid4().int % 99_999
    client.hset(keys.episode(episode), mapping={"job": job, "instance": "i1", "token_sha": keys.token_sha(token),
                                                 "task": json.dumps({"prompt": "1+1="}), "state": state})
    client.expire(keys.episode(episode), 600)
    return episode, token, job


@pytest.fixture
def rds(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def test_a_keyed_path_is_checked_as_the_bearer_token(app_client: Any, rds: redis.Redis) -> None:
    episode, token, job = _episode(rds)
    other, other_token, _ = _episode(rds)  # another episode (another job, another team's alike)
    ended, ended_token, _ = _episode(rds, state="ended")
    body = {"model": "policy", "messages": [{"role": "user", "content": "1+1="}]}
    base = f"/api/v1/rollouts/{episode}/key"
    assert app_client.get(f"{base}/{token}/v1/models").json()["data"][0]["id"] == "policy"
    for wrong in ("nope", other_token, token[:-1]):
        refused = app_client.post(f"{base}/{wrong}/v1/chat/completions", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", refused.text
        assert app_client.get(f"{base}/{wrong}/v1/models").status_code == 401
    # a right bearer does not open a keyed path with a wrong key
    assert app_client.get(f"{base}/nope/v1/models", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    # another episode's path with this episode's token: 401, as with the bearer
    assert app_client.post(f"/api/v1/rollouts/{other}/key/{token}/v1/chat/completions", json=body).status_code == 401
    missing = app_client.post(f"/api/v1/rollouts/ep-none-{uuid.uuid4().hex[:6]}/key/{token}/v1/chat/completions",
                              json=body)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "episode_not_found", missing.text
    over = app_client.post(f"/api/v1/rollouts/{ended}/key/{ended_token}/v1/chat/completions", json=body)
    assert over.status_code == 409, over.text
    bad = app_client.post(f"{base}/nope/v1/chat/completions", json={"messages": []})  # 401 before the body's 400
    assert bad.status_code == 401, bad.text
    assert rds.llen(keys.calls(job, "i1")) == 0  # nothing refused reached the instance


def test_a_keyed_call_is_served_and_recorded_like_a_bearer_one(app_client: Any, rds: redis.Redis) -> None:
    episode, token, job = _episode(rds)
    seen: list[dict[str, Any]] = []

    def instance() -> None:
        popped = rds.blpop([keys.calls(job, "i1")], timeout=30)
        assert popped is not None
        call = json.loads(popped[1])
        seen.append(call)
        rds.lpush(keys.reply(call["call"]), json.dumps({
            "choices": [{"text": "2", "tool_calls": [], "token_ids": [17, 2], "finish_reason": "stop"}],
            "prompt_token_ids": [5, 6, 7], "version": 3}))

    thread = threading.Thread(target=instance, daemon=True)
    thread.start()
    answer = app_client.post(f"/api/v1/rollouts/{episode}/key/{token}/v1/chat/completions",
                             json={"model": "policy", "messages": [{"role": "user", "content": "1+1="}]},
                             headers={"Authorization": "Bearer EMPTY"})  # the served env's own key: ignored
    thread.join(timeout=30)
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert done["choices"][0]["token_ids"] == [17, 2] and done["prompt_token_ids"] == [5, 6, 7]
    assert done["policy_version"] == 3
    assert [c["episode"] for c in seen] == [episode] and token not in json.dumps(seen)


def test_the_access_log_never_shows_the_key() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("1.2.3.4:5", "POST", "/api/v1/rollouts/7:0:1~1/key/gw_s3cret/v1/chat/completions",
                                "1.1", 200), None)
    assert KeyRedaction().filter(record)
    line = record.getMessage()
    assert "gw_s3cret" not in line and "/rollouts/7:0:1~1/key/***/v1/chat/completions" in line, line
