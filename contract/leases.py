"""Generation leases in Redis: generation slots held outside the jobs' own instances (deployment replicas,
evaluation runners). Granting one is the control plane's (backend/services/generation_leases.py: only while a slot is
free); holders refresh and release theirs here (torch-free, Redis only).

A lease is a field of the hash `keys.generation_leases()`: lease id -> JSON {team_id, kind, until}; it counts until
`until` unless refreshed, so a holder that died gives its slot back.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

from contract import keys


@dataclass(frozen=True)
class Lease:
    id: str
    team_id: int
    kind: str  # deployment | evaluation
    until: float


def live(client: redis.Redis, now: float | None = None) -> list[Lease]:
    """Leases not expired (expired ones are dropped on the way)."""
    now = time.time() if now is None else now
    out, expired = [], []
    for field, raw in client.hgetall(keys.generation_leases()).items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        entry = json.loads(raw)
        if float(entry["until"]) < now:
            expired.append(name)
        else:
            out.append(Lease(name, int(entry["team_id"]), str(entry["kind"]), float(entry["until"])))
    if expired:
        client.hdel(keys.generation_leases(), *expired)
    return out


def put(client: redis.Redis, lease: str, team_id: int, kind: str, ttl_s: float) -> None:
    client.hset(keys.generation_leases(), lease,
                json.dumps({"team_id": team_id, "kind": kind, "until": time.time() + ttl_s}))


def refresh(client: redis.Redis, lease: str, ttl_s: float) -> None:
    """Extend a held lease (a holder's heartbeat); a lease already gone is not revived."""
    raw = client.hget(keys.generation_leases(), lease)
    if raw is not None:
        entry = json.loads(raw)
        put(client, lease, int(entry["team_id"]), str(entry["kind"]), ttl_s)


def release(client: redis.Redis, lease: str) -> None:
    client.hdel(keys.generation_leases(), lease)
