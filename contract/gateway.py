"""The rollout gateway's Redis keys and tokens (docs/architecture.md#rollout-gateway): the API process and the job's
generation instance meet here, as on-demand inference does (contract/keys.py `inference_*`).

    episode(ep)             hash {job, instance, token_sha, task (JSON), state: open|claimed|ended, reward?}
    open_episodes(job)      list of episode ids waiting for an agent (the instance LPUSHes, a claim RPOPs)
    calls(job, instance)    list of chat calls (JSON {call, episode, body}) the instance pops and samples
    reply(call)             list the instance LPUSHes the call's result to; the API BLPOPs it
    ended(job, instance)    list of episode ids whose agent posted its reward (the instance pops and finishes them)
    recorded(job)           list of the job's last RECORDED_CALLS answered calls as recorded (JSON {episode, messages,
                            tools, prompt_ids, prompt_text, version, choices: [{ids, logprobs}]}), newest first; read
                            with `recorded_calls` (the token-fidelity check, tests/integration/token_fidelity.py);
                            `episode` is the attempt's id (`episode_id_of(job, sample, attempt)`: an episode retried
                            after its agent's jail died is a new episode, `~attempt` on the first one's id)
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
ATTEMPT_MARK = "~"  # episode_id_of: a retried episode's id is the first one's + "~<attempt>"


def episode_id_of(job_id: int, sample_id: str, attempt: int = 0) -> str:
    """A gateway episode's id: unique across jobs (sample ids such as `0:0:1` repeat in every job, and an episode's
    Redis hash, with its token and any posted reward, outlives the job by EPISODE_TTL_S). `attempt` > 0: the episode
    retried after its agent's jail was lost (`~attempt` on the id), a new episode with its own token and calls."""
    base = f"ep-{job_id}-{sample_id}"[:120]
    return base if attempt == 0 else f"{base}{ATTEMPT_MARK}{attempt}"


def attempt_of(episode_id: str) -> tuple[str, int]:
    """(the first attempt's episode id, the attempt) of an episode id from `episode_id_of`."""
    base, mark, attempt = episode_id.rpartition(ATTEMPT_MARK)
    return (base, int(attempt)) if mark and attempt.isdigit() else (episode_id, 0)


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


def recorded_calls(client: redis.Redis, job_id: int, lost: bool = False) -> list[dict[str, Any]]:
    """The job's last `RECORDED_CALLS` answered gateway calls as the instance recorded them, oldest first; `lost`:
    also those of an attempt a later recorded attempt of the same episode superseded (its agent's jail died; those
    calls were never trained)."""
    raw: list[bytes] = client.lrange(recorded(job_id), 0, -1)  # type: ignore[assignment]
    calls = [json.loads(r) for r in reversed(raw)]
    if lost:
        return calls
    last: dict[str, int] = {}
    for call in calls:
        base, attempt = attempt_of(call["episode"])
        last[base] = max(last.get(base, 0), attempt)
    return [c for c in calls if attempt_of(c["episode"])[1] == last[attempt_of(c["episode"])[0]]]


def reply(call_id: str) -> str:
    return f"streamrl:gateway:reply:{call_id}"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(24)


def token_sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, sha: str) -> bool:
    return hmac.compare_digest(token_sha(token), sha)
