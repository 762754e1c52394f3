"""Per-deployment serving metrics (backend/services/deployments.py): each finished /openai/v1 call on a deployment is
recorded in Redis (`keys.deployment_calls`, newest first, the last KEEP), and read back as requests/s, p50/p99
latency and tokens/s over the last WINDOW_S seconds, beside the replicas' batch record (`keys.deployment_batches`).

    meter = metered(client, deployment_id, usage_meter)   # wraps the call's usage meter: latency from now
    metrics(client, deployment_id) -> {"requests_per_s", "p50_latency_s", "p99_latency_s", "tokens_per_s", ...}
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from typing import Any

import redis

from backend.services.inference import CallUsage, Meter
from contract import keys

KEEP = 2000
WINDOW_S = 60.0


def record(client: redis.Redis, deployment_id: int, latency_s: float, tokens: int) -> None:
    entry = json.dumps({"at": time.time(), "latency_s": round(latency_s, 4), "tokens": int(tokens)})
    with client.pipeline(transaction=False) as pipe:
        pipe.lpush(keys.deployment_calls(deployment_id), entry)
        pipe.ltrim(keys.deployment_calls(deployment_id), 0, KEEP - 1)
        pipe.hincrby(keys.deployment_batches(deployment_id), "calls", 1)
        pipe.execute()


def metered(client: redis.Redis, deployment_id: int, usage: Meter | None) -> Meter:
    """A meter recording the call in the deployment's metrics (latency from now to the call's end), then its usage."""
    started = time.monotonic()

    def meter(used: CallUsage) -> None:
        with contextlib.suppress(redis.RedisError):  # metrics are best effort; usage is what the team is charged
            record(client, deployment_id, time.monotonic() - started, used.tokens_generated)
        if usage is not None:
            usage(used)

    return meter


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def metrics(client: redis.Redis, deployment_id: int, window_s: float = WINDOW_S) -> dict[str, Any]:
    now = time.time()
    calls = [json.loads(raw) for raw in client.lrange(keys.deployment_calls(deployment_id), 0, KEEP - 1)]
    recent = [c for c in calls if now - float(c["at"]) <= window_s]
    latencies = [float(c["latency_s"]) for c in recent]
    batches = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
               for k, v in client.hgetall(keys.deployment_batches(deployment_id)).items()}
    return {
        "window_s": window_s,
        "requests": len(recent),
        "requests_per_s": len(recent) / window_s,
        "p50_latency_s": _percentile(latencies, 0.50),
        "p99_latency_s": _percentile(latencies, 0.99),
        "tokens_per_s": sum(int(c["tokens"]) for c in recent) / window_s,
        "total_calls": int(batches.get("calls", 0)),
        "last_call_at": float(calls[0]["at"]) if calls else None,
        "batches": {"steps": int(batches.get("steps", 0)), "mixed_steps": int(batches.get("mixed_steps", 0)),
                    "max_adapters": int(batches.get("max_adapters", 0)), "replica": batches.get("replica")},
    }
