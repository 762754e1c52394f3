"""The rollout gateway's API side (docs/architecture.md#rollout-gateway; the instance's side is
workers/runtime/gateway.py, the Redis keys contract/gateway.py): claim an open episode of a job, answer its agent's
chat calls by handing them to the job's generation instance that holds the episode, end it with a reward.

An episode's routes take its episode-scoped token as the bearer key (what an OpenAI client sends as `api_key`):
another episode's token, or a team key, is a 401; an unknown or ended episode a 404 / 409.

The episode routes run on the event loop with an asyncio Redis client (`redis.asyncio`): a call waits for its
instance's answer on BLPOP without holding a thread, so 64 agents waiting at once cost 64 idle coroutines, not a
queue behind the API's thread pool (bench/gateway.py). The claim route (a database read) stays synchronous.

A chat call costs one Redis round trip: a script checks the episode's token and state and pushes the call on its
instance's list (or pushes the refusal on the call's own reply list), pipelined with the BLPOP of that reply.
"""

from __future__ import annotations

import json
import math
import uuid
from typing import Any

import redis
import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from backend.services.openai_compat import OpenAIError
from backend.services.openai_inference import MAX_N, stop_strings
from contract import gateway as keys

CALL_TIMEOUT_S = 300
PARAMS = {"model", "messages", "tools", "tool_choice", "parallel_tool_calls", "n", "stop", "max_tokens",
          "max_completion_tokens", "temperature", "top_p", "seed", "stream", "stream_options", "user", "metadata",
          "store", "logprobs"}


class GatewayChat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field("policy", min_length=1, max_length=400)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=1024)
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    n: int | None = Field(None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1, le=16384)
    max_completion_tokens: int | None = Field(None, ge=1, le=16384)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    user: str | None = Field(None, max_length=256)
    metadata: dict[str, str] | None = None
    store: bool | None = None
    logprobs: bool | None = None


def parse_chat(body: Any) -> GatewayChat:
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object")
    for name in body:
        if name not in PARAMS:
            raise OpenAIError(f"{name}: not supported by the rollout gateway", param=name,
                              code="unsupported_parameter")
    try:
        request = GatewayChat.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OpenAIError(f"{where}: {error['msg']}", param=where or None) from None
    if request.tool_choice not in (None, "auto") and request.tools:
        raise OpenAIError("tool_choice: only 'auto' is served (the policy decides whether to call a tool)",
                          param="tool_choice", code="unsupported_parameter")
    for index, message in enumerate(request.messages):
        if message.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise OpenAIError(f"messages[{index}].role must be system, developer, user, assistant or tool",
                              param=f"messages[{index}].role")
    return request


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _refused(reason: str, episode_id: str) -> OpenAIError:
    if reason == "missing":
        return OpenAIError(f"episode {episode_id[:120]!r} does not exist", code="episode_not_found", status_code=404)
    if reason == "token":
        return OpenAIError("the api key is not this episode's token", code="invalid_api_key", status_code=401)
    return OpenAIError(f"episode {episode_id[:120]!r} is over", code="episode_ended", status_code=409)


def _checked(raw: dict[Any, Any], episode_id: str, token: str | None) -> dict[str, str]:
    if not raw:
        raise _refused("missing", episode_id)
    state = {_text(k): _text(v) for k, v in raw.items()}
    if token is None or not keys.token_matches(token, state["token_sha"]):
        raise _refused("token", episode_id)
    if state["state"] == "ended":
        raise _refused("ended", episode_id)
    return state


async def episode_state(client: aioredis.Redis, episode_id: str, token: str | None) -> dict[str, str]:
    """The episode's record, if `token` is its token (401 otherwise; 404: no such episode; 409: it is over)."""
    return _checked(await client.hgetall(keys.episode(episode_id)), episode_id, token)


def claim(client: redis.Redis, job_id: int, base_url: str) -> dict[str, Any] | None:
    """The job's oldest open episode for an agent: its task, base URL and token; None when none is open."""
    while True:
        episode_id = client.rpop(keys.open_episodes(job_id))
        if episode_id is None:
            return None
        episode_id = _text(episode_id)
        raw = client.hgetall(keys.episode(episode_id))
        state = {_text(k): _text(v) for k, v in raw.items()}
        if state.get("state") != "open":
            continue  # ended (timed out) before anyone claimed it
        client.hset(keys.episode(episode_id), "state", "claimed")
        return {"episode": episode_id, "base_url": f"{base_url.rstrip('/')}/rollouts/{episode_id}/v1",
                "api_key": state["token"], "task": json.loads(state["task"])}


# KEYS: the episode, the call's reply list; ARGV: the token's sha, the call (JSON), the calls list's name as
# "<head>" .. job .. "<middle>" .. instance .. "<tail>" (contract/gateway.py `calls`), the reply list's TTL.
# The episode's token and state are checked, and the call pushed, in one atomic step: a refusal ("missing",
# "token", "ended") goes on the reply list, so the BLPOP pipelined after it returns at once.
_PUSH_CALL = """
local f = redis.call('HMGET', KEYS[1], 'token_sha', 'state', 'job', 'instance')
local refused = nil
if not f[1] then refused = 'missing' elseif f[1] ~= ARGV[1] then refused = 'token'
elseif f[2] == 'ended' then refused = 'ended' end
if refused then
  redis.call('LPUSH', KEYS[2], cjson.encode({refused = refused}))
  redis.call('EXPIRE', KEYS[2], ARGV[6])
  return refused
end
redis.call('LPUSH', ARGV[3] .. f[3] .. ARGV[4] .. f[4] .. ARGV[5], ARGV[2])
return 'ok'
"""
_JOB, _INSTANCE = 1234567, "\x00instance\x00"
_CALLS_HEAD, _, _rest = keys.calls(_JOB, _INSTANCE).partition(str(_JOB))
_CALLS_MIDDLE, _, _CALLS_TAIL = _rest.partition(_INSTANCE)


async def call(client: aioredis.Redis, episode_id: str, token: str | None, request: GatewayChat) -> dict[str, Any]:
    """Hand the call to the episode's instance, if `token` is its token and it is not over (the 401 / 404 / 409 of
    `episode_state`), and wait for its sampled choices (token ids included)."""
    if token is None:
        await episode_state(client, episode_id, token)  # raises: the 404 of a missing episode, else the 401
        raise _refused("token", episode_id)
    call_id = uuid.uuid4().hex
    body = request.model_dump(exclude_none=True)
    body["stop"] = stop_strings(request)  # type: ignore[arg-type]
    body["max_tokens"] = request.max_completion_tokens or request.max_tokens
    pipe = client.pipeline(transaction=False)  # the check, the push and the wait in one round trip
    pipe.eval(_PUSH_CALL, 2, keys.episode(episode_id), keys.reply(call_id), keys.token_sha(token),
              json.dumps({"call": call_id, "episode": episode_id, "body": body}), _CALLS_HEAD, _CALLS_MIDDLE,
              _CALLS_TAIL, keys.REPLY_TTL_S)
    pipe.blpop([keys.reply(call_id)], timeout=CALL_TIMEOUT_S)
    pushed, answer = await pipe.execute()
    if answer is None:
        raise OpenAIError(f"the job's generation instance did not answer within {CALL_TIMEOUT_S}s",
                          code="timeout", status_code=504)
    if _text(pushed) != "ok":
        raise _refused(_text(pushed), episode_id)
    reply: dict[str, Any] = json.loads(answer[1])
    if "error" in reply:
        raise OpenAIError(reply["error"], code="invalid_request", status_code=int(reply.get("status", 400)))
    return reply


def checked_reward(reward: Any) -> float | None:
    """The agent's reward: a finite number or None (a 400 naming `reward` otherwise)."""
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)
                               or not math.isfinite(reward)):
        raise OpenAIError(f"reward must be a finite number or null (got {str(reward)[:40]!r})", param="reward")
    return None if reward is None else float(reward)


async def end(client: aioredis.Redis, episode_id: str, state: dict[str, str], reward: Any) -> None:
    """The agent's reward (None: the job's grader alone) ends the episode."""
    value = checked_reward(reward)
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.episode(episode_id), mapping={"state": "ended", "reward": json.dumps(value)})
    pipe.lpush(keys.ended(int(state["job"]), state["instance"]), episode_id)
    await pipe.execute()


def completion(request: GatewayChat, reply: dict[str, Any], completion_id: str, created: int) -> dict[str, Any]:
    """OpenAI's chat.completion, each choice also carrying `token_ids` and the response `prompt_token_ids` (as vLLM
    returns them) and the policy `version` that sampled it."""
    choices = []
    for index, choice in enumerate(reply["choices"]):
        message: dict[str, Any] = {"role": "assistant", "content": choice["text"], "refusal": None}
        if choice["tool_calls"]:
            message["tool_calls"] = choice["tool_calls"]
        choices.append({"index": index, "finish_reason": choice["finish_reason"], "message": message,
                        "logprobs": None, "token_ids": choice["token_ids"]})
    completion_tokens = sum(len(c["token_ids"]) for c in reply["choices"])
    prompt = len(reply["prompt_token_ids"])
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": request.model,
            "choices": choices, "prompt_token_ids": reply["prompt_token_ids"], "policy_version": reply["version"],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def chunks(done: dict[str, Any]) -> list[dict[str, Any]]:
    """The completion as stream chunks: per choice its role + content (+ tool calls), then its finish."""
    base = {"id": done["id"], "object": "chat.completion.chunk", "created": done["created"], "model": done["model"]}
    out = []
    for choice in done["choices"]:
        delta: dict[str, Any] = {"role": "assistant", "content": choice["message"]["content"]}
        if "tool_calls" in choice["message"]:
            delta["tool_calls"] = [{**c, "index": i} for i, c in enumerate(choice["message"]["tool_calls"])]
        out.append({**base, "choices": [{"index": choice["index"], "delta": delta, "finish_reason": None,
                                         "token_ids": choice["token_ids"]}]})
        out.append({**base, "choices": [{"index": choice["index"], "delta": {},
                                         "finish_reason": choice["finish_reason"]}]})
    return out
