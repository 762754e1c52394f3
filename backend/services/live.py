"""Live job events over Redis pub/sub: channel `streamrl:job:<id>:live`, message JSON `{"type": ..., "data": ...}`.

Types: metrics (iteration metrics), event (JobEvent), status (JobPublic), timeline (spans), samples (SamplePublic
list). Publishing is best effort: live views are a convenience, the database is the record.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import redis

from contract import keys

log = logging.getLogger(__name__)
LiveType = Literal["metrics", "event", "status", "timeline", "samples"]
LIVE_TYPES: tuple[str, ...] = ("metrics", "event", "status", "timeline", "samples")


def live_channel(job_id: int) -> str:
    return keys.live_channel(job_id)


def publish_live(client: redis.Redis | None, job_id: int, type: LiveType, data: Any) -> bool:
    """Publish one live message; returns False (and logs) when Redis is absent or unreachable."""
    assert type in LIVE_TYPES, f"unknown live type {type!r}"
    if client is None:
        return False
    try:
        client.publish(live_channel(job_id), json.dumps({"type": type, "data": data}, default=str))
    except redis.RedisError as exc:
        log.warning("live publish for job %s failed: %s", job_id, exc)
        return False
    return True


def wake_controller(client: redis.Redis | None) -> bool:
    """Wake the controller's reconcile loop now (`keys.controller_wake`); returns False when Redis is absent or
    unreachable (the controller then notices at its next timed pass)."""
    if client is None:
        return False
    try:
        pipe = client.pipeline(transaction=False)
        key = keys.controller_wake()
        pipe.lpush(key, 1)
        pipe.ltrim(key, 0, 0)  # one pending wake-up is enough
        pipe.expire(key, 3600)  # no controller running: the key does not stay
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("controller wake-up failed: %s", exc)
        return False
    return True


REVOCATIONS_CHANNEL = "streamrl:auth:revocations"


def publish_revocation(client: redis.Redis | None, reason: str) -> bool:
    """Tell open SSE streams that some principal lost access (logout, password change, member removed, key revoked):
    each stream then re-checks its own credentials at once. Streams also re-check periodically, so a lost message
    only delays the close."""
    if client is None:
        return False
    try:
        client.publish(REVOCATIONS_CHANNEL, json.dumps({"reason": reason}))
    except redis.RedisError as exc:
        log.warning("revocation publish failed: %s", exc)
        return False
    return True
