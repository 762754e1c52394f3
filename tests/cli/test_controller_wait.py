"""The controller's wait between reconcile passes: a wake-up in Redis ends it at once, else it lasts the interval."""

from __future__ import annotations

import threading
import time
import uuid

import redis

from backend.controller.loop import wait_for_wake


def test_a_wake_up_ends_the_wait_at_once_and_is_consumed(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = f"test:controller-wake:{uuid.uuid4().hex}"
    pusher = threading.Timer(0.3, lambda: client.lpush(key, 1, 1))
    started = time.monotonic()
    pusher.start()
    assert wait_for_wake(client, key, 30.0) is True
    assert time.monotonic() - started < 10.0  # woken by the push, not the 30 s timeout
    assert client.exists(key) == 0  # wake-ups that piled up are consumed with it


def test_without_a_wake_up_the_wait_lasts_the_interval(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    key = f"test:controller-wake:{uuid.uuid4().hex}"
    started = time.monotonic()
    assert wait_for_wake(client, key, 0.5) is False
    assert time.monotonic() - started >= 0.45


def test_without_redis_it_sleeps_the_interval() -> None:
    client = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    started = time.monotonic()
    assert wait_for_wake(client, "any", 0.3) is False
    assert time.monotonic() - started >= 0.25
