"""A sampling session's completion queue (`retrieve_futures`) and its clone ids (`join_sampling_session`), which the
`tinker` SDK (0.38) uses when `/client/config` turns on `sample_use_retrieve_futures` / `sample_join_sampling_session`
(docs/tinker.md). Routes: backend/api/routes/tinker_sampling.py.

    target = target_of(sampler_id, seq_id)           # (sampling session, clone = seq_id // 1e9), as the SDK names it
    track(client, target, request_id)                # asample: the request is pending in its target
    report(client, target, request_id, "finished")   # the sample stored its result (or "failed")
    completions, cursor = poll(client, team, target, prev_cursor)   # retrieve_futures: what finished since
    counter = join(client, team, sampler_id)         # a new clone's id: 1, 2, ... (the original client is 0)

Per target, Redis holds a counter (the cursor), a sorted set of completions scored by it, and the set of its
pending request ids. Reporting is one Lua script: the request leaves the pending set and, only if it was in it,
gets the next cursor and its completion, so each request completes once, in cursor order, and a poller that has
seen cursor n has seen every completion up to n. A poll trims what the caller has seen (`prev_cursor`), answers
what is newer, and reports pending requests whose runner is gone (no pending marker, no result) as failed: the
SDK then fetches the failure with retrieve_future rather than waiting forever.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from backend.db.models import Team
from backend.services.tinker import TinkerError
from contract import keys

CLONE_BLOCK = 1_000_000_000  # the SDK's seq ids of clone c are c * 1e9 + n
TTL_S = 7 * 86400  # as a sampler record
_REPORT = """
if redis.call('SREM', KEYS[3], ARGV[1]) == 0 then return 0 end
local cursor = redis.call('INCR', KEYS[1])
redis.call('ZADD', KEYS[2], cursor, ARGV[2])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[3]) end
return cursor
"""


@dataclass(frozen=True)
class Target:
    sampler_id: str
    clone: int

    def key(self, part: str) -> str:
        return f"streamrl:tinker:futures:{self.sampler_id}:{self.clone}:{part}"


def target_of(sampler_id: str, seq_id: Any) -> Target:
    seq = seq_id if isinstance(seq_id, int) and not isinstance(seq_id, bool) and seq_id >= 0 else 0
    return Target(sampler_id, seq // CLONE_BLOCK)


def track(client: redis.Redis, target: Target, request_id: str) -> None:
    pipe = client.pipeline()
    pipe.sadd(target.key("pending"), request_id)
    pipe.expire(target.key("pending"), TTL_S)
    pipe.execute()


def report(client: redis.Redis, target: Target, request_id: str, state: str) -> int:
    """The request's completion (`finished` or `failed`); 0 when it was reported already."""
    completion = json.dumps({"state": state, "request_id": request_id})
    return int(client.eval(_REPORT, 3, target.key("cursor"), target.key("events"), target.key("pending"),
                           request_id, completion, TTL_S))


def _report_lost(client: redis.Redis, target: Target, marker: Callable[[str], str]) -> None:
    """Pending requests whose runner stopped without a result (`marker(request_id)`, the running sample's key, gone):
    reported failed, and retrieve_future then says why."""
    members: Any = client.smembers(target.key("pending"))
    for raw in members:
        request_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        if not client.exists(marker(request_id)) and not client.exists(keys.tinker_result(request_id)):
            report(client, target, request_id, "failed")


def poll(client: redis.Redis, target: Target, prev_cursor: int, marker: Callable[[str], str] | None = None
         ) -> tuple[list[dict[str, Any]], int]:
    """Completions after `prev_cursor` (those at or before it are trimmed) and the cursor to pass next; with
    `marker`, lost requests are reported first."""
    if prev_cursor > 0:
        client.zremrangebyscore(target.key("events"), "-inf", prev_cursor)
    if marker is not None:
        _report_lost(client, target, marker)
    rows: Any = client.zrangebyscore(target.key("events"), f"({prev_cursor}", "+inf", withscores=True)
    completions = [json.loads(member) for member, _ in rows]
    cursor = max([int(score) for _, score in rows] + [prev_cursor])
    return completions, cursor


def forget(client: redis.Redis, team: Team, request_ids: list[str]) -> None:
    """retrieved_request_ids: results the client has fetched (the team's own sample requests only) are deleted."""
    own = [keys.tinker_result(r) for r in request_ids if r.startswith(f"sample.{team.id}.")]
    if own:
        client.delete(*own)


def join(client: redis.Redis, sampler_id: str) -> int:
    """The next clone id of a sampling session (1, 2, ...; the original client is 0)."""
    key = f"streamrl:tinker:sampler_clients:{sampler_id}"
    counter = int(client.incr(key))
    client.expire(key, TTL_S)
    if counter >= CLONE_BLOCK:
        raise TinkerError(400, f"sampling session {sampler_id!r} has had {CLONE_BLOCK - 1} clients; create another")
    return counter


def check_target(body: Any) -> tuple[str, int]:
    """retrieve_futures' `target`: a sampling session id and a clone id (400 naming what is wrong)."""
    target = body.get("target") if isinstance(body, dict) else None
    if not isinstance(target, dict) or target.get("type", "sampling_session") != "sampling_session":
        raise TinkerError(400, "target must be {type: sampling_session, sampling_session_id, cloned_sampler_id}")
    sampler_id, clone = target.get("sampling_session_id"), target.get("cloned_sampler_id", 0)
    if not isinstance(sampler_id, str) or not sampler_id or len(sampler_id) > 200:
        raise TinkerError(400, "target.sampling_session_id must be a sampling session id")
    if not isinstance(clone, int) or isinstance(clone, bool) or not 0 <= clone < CLONE_BLOCK:
        raise TinkerError(400, f"target.cloned_sampler_id must be an integer from 0 to {CLONE_BLOCK - 1}")
    return sampler_id, clone

