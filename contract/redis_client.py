"""Redis clients that ride out a restart of the server: every command retries with exponential backoff.

A Redis restart (or a failover) of up to ~2 minutes stalls the calling process instead of failing it; longer
outages raise as before, and the controller's reconcile loop decides what the job's state is.
"""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ConnectionError, TimeoutError
from redis.retry import Retry

RETRIES = 24  # 0.1 s doubling, capped at 5 s: about 2 minutes in all


def connect(url: str, **kwargs: object) -> redis.Redis:
    retry = Retry(ExponentialBackoff(cap=5.0, base=0.1), RETRIES)
    return redis.Redis.from_url(url, retry=retry, retry_on_error=[ConnectionError, TimeoutError, BusyLoadingError],
                                health_check_interval=30, **kwargs)
