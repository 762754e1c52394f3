"""Reward errors over a sliding window: instances tally every reward they finish into time buckets in Redis, the
controller reads the last `window_s` and fails a job whose error rate passes `failover.reward_error_rate`.

A reward that never returns is cut at its `timeout_s` and counts as an error then, so a job whose reward hangs is
failed within about max(window, MIN_CALLS x timeout_s / instances) instead of after a whole iteration of timeouts.
"""

from __future__ import annotations

import time

import redis

from contract import keys

BUCKET_S = 5  # tally granularity
KEEP_S = 600  # a bucket expires after this
MIN_CALLS = 8  # fewer rewards than this in the window never fail a job
FLUSH_EVERY_S = 1.0  # an instance writes its tally at most this often while no reward fails


def _bucket(moment: float) -> int:
    return int(moment // BUCKET_S)


class RewardTally:
    """An instance's running count of finished rewards and errors, written to the job's buckets."""

    def __init__(self, client: redis.Redis, job_id: int) -> None:
        self.client, self.job_id = client, job_id
        self.calls = self.errors = 0
        self.last_error: str | None = None
        self.written_at = 0.0

    def add(self, error: str | None) -> None:
        self.calls += 1
        if error:
            self.errors, self.last_error = self.errors + 1, error

    def flush(self, force: bool = False) -> None:
        """Write what was counted: at once when a reward failed (or `force`), else at most every FLUSH_EVERY_S."""
        now = time.time()
        if not self.calls or not (force or self.errors or now - self.written_at >= FLUSH_EVERY_S):
            return
        key = keys.reward_tally(self.job_id, _bucket(now))
        pipe = self.client.pipeline(transaction=False)
        pipe.hincrby(key, "calls", self.calls)
        if self.errors:
            pipe.hincrby(key, "errors", self.errors)
            pipe.hset(key, "last_error", (self.last_error or "")[:500])
        pipe.expire(key, KEEP_S)
        pipe.execute()
        self.calls = self.errors = 0
        self.written_at = now


def reward_window(client: redis.Redis, job_id: int, window_s: float) -> tuple[int, int, str | None]:
    """(rewards finished, rewards failed, newest error text) over the last `window_s` seconds (whole buckets)."""
    now = _bucket(time.time())
    pipe = client.pipeline(transaction=False)
    for bucket in range(now - int(window_s // BUCKET_S), now + 1):
        pipe.hgetall(keys.reward_tally(job_id, bucket))
    calls = errors = 0
    last: str | None = None
    for tally in pipe.execute():
        calls += int(tally.get(b"calls", 0))
        errors += int(tally.get(b"errors", 0))
        last = tally[b"last_error"].decode() if b"last_error" in tally else last
    return calls, errors, last


def error_rate_exceeded(calls: int, errors: int, rate: float) -> bool:
    return calls >= MIN_CALLS and errors >= rate * calls


def clear_tally(client: redis.Redis, job_id: int) -> None:
    found = list(client.scan_iter(match=keys.reward_tally(job_id, 0).rsplit(":", 1)[0] + ":*", count=500))
    if found:
        client.delete(*found)
