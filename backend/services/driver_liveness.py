"""What Redis says about job drivers, for the job's health: how long ago each driver last beat.

The driver beats every 2 s (workers/runtime/telemetry.py `Heartbeat`) into a key that expires after
STREAMRL_DRIVER_HEARTBEAT_TTL_S (60 s); the controller restarts a driver only when the key is gone. A killed driver
leaves its key for up to a TTL, so the health reads the beat's own time instead: no beat for `LOST_AFTER_S` means
the driver is lost (worker clocks are assumed in sync to well under that, e.g. by NTP).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import redis

from contract import keys

LOST_AFTER_S = 10.0  # four missed beats


@dataclass(frozen=True)
class DriverBeats:
    """`ages`: job id -> seconds since its driver's newest beat, None when no beat is stored. `seen`: jobs whose
    driver the controller has seen alive (`keys.driver_seen`): with no beat stored, that driver is gone. `reachable`
    False: Redis did not answer (`error` says why), so no driver can be seen (and no sample can flow)."""

    reachable: bool
    ages: dict[int, float | None] = field(default_factory=dict)
    seen: frozenset[int] = frozenset()
    error: str | None = None


def _beat_time(raw: bytes | str) -> float | None:
    try:
        return float(json.loads(raw)["at"])
    except (ValueError, KeyError, TypeError):
        return None  # a beat without its time (older workers): present means alive


def read_driver_beats(client: redis.Redis | None, job_ids: list[int]) -> DriverBeats | None:
    """One MGET for all `job_ids`; None when the API has no Redis (health then judges from the database alone)."""
    if client is None or not job_ids:
        return None
    try:
        raws = client.mget([keys.driver_heartbeat(job_id) for job_id in job_ids]
                           + [keys.driver_seen(job_id) for job_id in job_ids])
    except redis.RedisError as err:
        return DriverBeats(reachable=False, error=f"{type(err).__name__}: {err}")
    now = time.time()
    ages: dict[int, float | None] = {}
    for job_id, raw in zip(job_ids, raws[:len(job_ids)], strict=True):
        at = _beat_time(raw) if raw is not None else None
        ages[job_id] = None if raw is None else max(0.0, now - at) if at is not None else 0.0
    seen = frozenset(job_id for job_id, raw in zip(job_ids, raws[len(job_ids):], strict=True) if raw is not None)
    return DriverBeats(reachable=True, ages=ages, seen=seen)
