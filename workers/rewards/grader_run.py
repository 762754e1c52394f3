"""The generation pool's side of POST /graders/run for specs with model-backed graders (backend/services/graders.py):
score one sample with the models the control plane resolved, and push the result to the request's reply key.
The models stay loaded in this worker process (workers/rewards/grader_models.py), so later runs answer at once."""

from __future__ import annotations

import json
from typing import Any

import redis

from contract import keys
from workers.rewards.factory import build_reward
from workers.rewards.grader_models import LocalGraderModels

REPLY_TTL_S = 600  # a reply nobody read (its request timed out) expires


def grade(payload: dict[str, Any], device: str) -> dict[str, Any]:
    """{"reward", "sub_rewards", "error"} of payload's spec on its sample (prompt, output_text, item)."""
    try:
        reward = build_reward(payload["spec"], LocalGraderModels(payload["models"], device))
    except ValueError as exc:  # validated by the control plane: only a changed registry gets here
        return {"reward": 0.0, "sub_rewards": {}, "error": str(exc)}
    try:
        outcome = reward.score(payload["prompt"], payload["output_text"], payload["item"])
    finally:
        reward.close()
    subs = {name: value for name, value in outcome.components.items() if name != "reward"}
    return {"reward": outcome.value, "sub_rewards": subs, "error": outcome.error}


def answer(client: redis.Redis, request_id: str, payload: dict[str, Any], device: str) -> None:
    reply = keys.grader_reply(request_id)
    pipe = client.pipeline()
    pipe.rpush(reply, json.dumps(grade(payload, device)))
    pipe.expire(reply, REPLY_TTL_S)
    pipe.execute()
