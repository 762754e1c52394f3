"""Liveness: timeouts shared by the controller (which alone declares processes dead) and the runtime (which waits
for them), and the driver's heartbeat key (instances heartbeat in their database row through the reporter).

Overridable by environment (tests shorten them): STREAMRL_INSTANCE_HEARTBEAT_TIMEOUT_S,
STREAMRL_INSTANCE_START_TIMEOUT_S, STREAMRL_DRIVER_START_TIMEOUT_S, STREAMRL_DRIVER_HEARTBEAT_TTL_S.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

import redis

from contract import keys


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


@dataclass(frozen=True)
class Timeouts:
    instance_heartbeat_s: float = 20.0  # a running instance silent this long is dead
    instance_start_s: float = 300.0  # a started instance that never heartbeats (no free worker, load failed)
    driver_start_s: float = 600.0  # an admitted job whose driver never started (no training worker)
    driver_heartbeat_ttl_s: float = 60.0  # the driver refreshes its key more often than this

    @classmethod
    def from_env(cls) -> Timeouts:
        return cls(
            instance_heartbeat_s=_env_float("STREAMRL_INSTANCE_HEARTBEAT_TIMEOUT_S", cls.instance_heartbeat_s),
            instance_start_s=_env_float("STREAMRL_INSTANCE_START_TIMEOUT_S", cls.instance_start_s),
            driver_start_s=_env_float("STREAMRL_DRIVER_START_TIMEOUT_S", cls.driver_start_s),
            driver_heartbeat_ttl_s=_env_float("STREAMRL_DRIVER_HEARTBEAT_TTL_S", cls.driver_heartbeat_ttl_s),
        )


def driver_key(job_id: int) -> str:
    return keys.driver_heartbeat(job_id)


def driver_sent_key(job_id: int) -> str:
    return keys.driver_sent(job_id)


def beat_driver(client: redis.Redis, job_id: int, ttl_s: float | None = None) -> None:
    """The driver is alive; the value says where it runs ({"at", "pid", "host"}: operators and fault tests)."""
    beat = json.dumps({"at": time.time(), "pid": os.getpid(), "host": socket.gethostname()})
    client.set(driver_key(job_id), beat, ex=max(1, int(ttl_s or Timeouts.from_env().driver_heartbeat_ttl_s)))


def driver_alive(client: redis.Redis, job_id: int) -> bool:
    return bool(client.exists(driver_key(job_id)))


def mark_driver_sent(client: redis.Redis, job_id: int) -> bool:
    """Record that run_job was sent for `job_id`; False when it had been already (never send it twice)."""
    return bool(client.set(driver_sent_key(job_id), time.time(), nx=True))


def driver_sent_at(client: redis.Redis, job_id: int) -> float | None:
    raw = client.get(driver_sent_key(job_id))
    return float(raw) if raw is not None else None
