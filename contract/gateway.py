"""The rollout gateway's Redis keys and tokens (docs/architecture.md#rollout-gateway): the API process and the job's
generation instance meet here, as on-demand inference does (contract/keys.py `inference_*`).

    episode(ep)             hash {job, instance, token_sha, task (JSON), state: open|claimed|ended, reward?}
    open_episodes(job)      list of episode ids waiting for an agent (the instance LPUSHes, a claim RPOPs)
    calls(job, instance)    list of chat calls (JSON {call, episode, body}) the instance pops and samples
    reply(call)             list the instance LPUSHes the call's result to; the API BLPOPs it
    ended(job, instance)    list of episode ids whose agent posted its reward (the instance pops and finishes them)
    recorded(job)           list of the job's last RECORDED_CALLS answered calls as recorded (JSON {episode, messages,
                            tools, prompt_ids, prompt_text, version, choices: [{ids, logprobs}]}), newest first; read
                            with `recorded_calls` (the token-fidelity check, tests/integration/token_fidelity.py)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

import redis

from contract.keys import prefix

EPISODE_TTL_S = 24 * 3600
REPLY_TTL_S = 600
RECORDED_CALLS = 64  # per job: bounded (a call's record holds its whole prompt), kept as long as an episode
TOKEN_PREFIX = "srl_ep_"


def episode_id_of(job_id: int, sample_id: str) -> str:
    """A gateway episode's id: unique across jobs (sample ids such as `0:0:1` repeat in every job, and an episode's
    Redis hash, with its token and any posted reward, outlives the job by EPISODE_TTL_S)."""
    return f"ep-{job_id}-{sample_id}"[:120]


def episode(episode_id: str) -> str:
    return f"streamrl:gateway:{episode_id}"


def open_episodes(job_id: int) -> str:
    return f"{prefix(job_id)}:gateway:open"


def calls(job_id: int, instance_id: str) -> str:
    return f"{prefix(job_id)}:gateway:{instance_id}:calls"


def ended(job_id: int, instance_id: str) -> str:
    return f"{prefix(job_id)}:gateway:{instance_id}:ended"


def recorded(job_id: int) -> str:
    return f"{prefix(job_id)}:gateway:recorded"


def recorded_calls(client: redis.Redis, job_id: int) -> list[dict[str, Any]]:
    """The job's last `RECORDED_CALLS` answered gateway calls as the instance recorded them, oldest first."""
    raw: list[bytes] = client.lrange(recorded(job_id), 0, -1)  # type: ignore[assignment]
    return [json.loads(r) for r in reversed(raw)]


def reply(call_id: str) -> str:
    return f"streamrl:gateway:reply:{call_id}"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(24)


def token_sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, sha: str) -> bool:
    return hmac.compare_digest(token_sha(token), sha)
