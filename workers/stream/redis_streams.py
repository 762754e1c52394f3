"""`PromptQueue` and `SampleStream`: Redis Streams with consumer groups (docs/architecture.md, "Data flow").

Delivery is at-least-once, consumption idempotent:
- an entry is acknowledged (XACK, then XDEL so the stream holds only unfinished work) only after it was used;
- entries a consumer read but never acknowledged are reclaimed with XAUTOCLAIM once idle for `reclaim_after_s`
  (the consumer died: a restarted instance or driver picks them up);
- sample ids are unique; the trainer records used ids in a Redis set, and producers skip ids already streamed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis

from contract import keys
from contract.sample import PromptRequest, Sample
from workers.stream.base import PromptQueueBase, SampleStreamBase

PROMPT_GROUP = "generators"
SAMPLE_GROUP = "trainer"

# KEYS[1] produced set, KEYS[2] sample stream, KEYS[3] prompt stream (optional); ARGV[1] prompt group, then per
# sample: id, payload, the prompt entry it finishes ('' for none). XADD only for a new sample id; the prompt entry is
# acknowledged and deleted in the same atomic step. Returns how many were added. One round trip for a batch.
_PUBLISH_ONCE = """
local added = 0
for i = 2, #ARGV, 3 do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[2], '*', 'data', ARGV[i + 1])
    added = added + 1
  end
  if KEYS[3] and ARGV[i + 2] ~= '' then
    redis.call('XACK', KEYS[3], ARGV[1], ARGV[i + 2])
    redis.call('XDEL', KEYS[3], ARGV[i + 2])
  end
end
return added
"""


def _ensure_group(client: redis.Redis, stream: str, group: str) -> None:
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise


def _read(
    client: redis.Redis, stream: str, group: str, consumer: str, count: int, block_ms: int, reclaim_after_s: float
) -> list[tuple[str, bytes]]:
    """Reclaimed entries of dead consumers first, then new ones (blocking up to `block_ms` when none)."""
    claimed: Any = client.xautoclaim(stream, group, consumer, min_idle_time=int(reclaim_after_s * 1000), count=count)
    entries = [(entry_id, fields) for entry_id, fields in claimed[1] if fields]
    if len(entries) < count:
        got: Any = client.xreadgroup(group, consumer, {stream: ">"}, count=count - len(entries), block=block_ms or None)
        for _stream, items in got or []:
            entries.extend(items)
    return [(_s(entry_id), fields[b"data"]) for entry_id, fields in entries]


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PromptQueue(PromptQueueBase):
    """The prompt stream of one generation instance of one job."""

    def __init__(self, client: redis.Redis, job_id: int, instance_id: str, reclaim_after_s: float = 30.0):
        self.client, self.job_id, self.instance_id = client, job_id, instance_id
        self.stream = keys.prompt_stream(job_id, instance_id)
        self.reclaim_after_s = reclaim_after_s
        _ensure_group(client, self.stream, PROMPT_GROUP)

    def put(self, requests: Iterable[PromptRequest]) -> int:
        pipe = self.client.pipeline(transaction=False)
        n = 0
        for request in requests:
            request.queued_at = request.queued_at or time.time()
            pipe.xadd(self.stream, {"data": request.to_json()})
            n += 1
        pipe.execute()
        return n

    def read(self, consumer: str, count: int, block_ms: int = 0) -> list[tuple[str, PromptRequest]]:
        try:
            raw = _read(self.client, self.stream, PROMPT_GROUP, consumer, count, block_ms, self.reclaim_after_s)
        except redis.ResponseError as err:
            if "NOGROUP" not in str(err) and "UNBLOCKED" not in str(err):
                raise
            _ensure_group(self.client, self.stream, PROMPT_GROUP)  # the driver drained (deleted) this stream
            return []
        return [(entry_id, PromptRequest.from_json(data)) for entry_id, data in raw]

    def ack(self, entry_ids: list[str]) -> None:
        if entry_ids:
            pipe = self.client.pipeline(transaction=True)
            pipe.xack(self.stream, PROMPT_GROUP, *entry_ids)
            pipe.xdel(self.stream, *entry_ids)
            pipe.execute()

    def backlog(self) -> int:
        """Requests not yet finished (queued or in flight): acknowledged entries are deleted."""
        return int(self.client.xlen(self.stream))

    def drain(self) -> list[PromptRequest]:
        """Remove and return every unfinished request (the instance is gone; the driver re-dispatches them)."""
        entries: Any = self.client.xrange(self.stream, "-", "+")
        self.client.delete(self.stream)
        return [PromptRequest.from_json(fields[b"data"]) for _id, fields in entries]


class SampleStream(SampleStreamBase):
    """The finished-sample stream of one job: every instance produces, the job driver consumes."""

    def __init__(self, client: redis.Redis, job_id: int, reclaim_after_s: float = 60.0):
        self.client, self.job_id = client, job_id
        self.stream = keys.sample_stream(job_id)
        self.reclaim_after_s = reclaim_after_s
        self._publish = client.register_script(_PUBLISH_ONCE)
        _ensure_group(client, self.stream, SAMPLE_GROUP)

    def already_produced(self, sample_id: str) -> bool:
        return bool(self.client.sismember(keys.produced_set(self.job_id), sample_id))

    def produced_among(self, sample_ids: list[str]) -> set[str]:
        """Which of `sample_ids` were streamed already: one SMISMEMBER."""
        if not sample_ids:
            return set()
        found: Any = self.client.smismember(keys.produced_set(self.job_id), sample_ids)
        return {sample_id for sample_id, hit in zip(sample_ids, found, strict=True) if hit}

    def publish(self, sample: Sample) -> bool:
        """XADD `sample` unless its id was streamed before; True when added."""
        return self.publish_finished(None, [(sample, "")]) == 1

    def publish_finished(self, queue: PromptQueue | None, finished: list[tuple[Sample, str]]) -> int:
        """Stream each (sample, prompt entry it answers) once per sample id and acknowledge the entries of `queue`,
        all in one atomic round trip; returns how many samples were new."""
        if not finished:
            return 0
        stream_keys = [keys.produced_set(self.job_id), self.stream] + ([queue.stream] if queue is not None else [])
        args: list[str] = [PROMPT_GROUP]
        for sample, entry_id in finished:
            args += [sample.sample_id, sample.to_json(), entry_id if queue is not None else ""]
        return int(self._publish(keys=stream_keys, args=args))

    def read(self, consumer: str, count: int, block_ms: int = 0) -> list[tuple[str, Sample]]:
        try:
            raw = _read(self.client, self.stream, SAMPLE_GROUP, consumer, count, block_ms, self.reclaim_after_s)
        except redis.ResponseError as err:
            if "NOGROUP" not in str(err):
                raise
            _ensure_group(self.client, self.stream, SAMPLE_GROUP)  # Redis restarted without its data
            return []
        return [(entry_id, Sample.from_json(data)) for entry_id, data in raw]

    def is_consumed(self, sample_id: str) -> bool:
        return bool(self.client.sismember(keys.consumed_set(self.job_id), sample_id))

    def commit(self, entries: list[tuple[str, str]]) -> None:
        """Mark (entry id, sample id) pairs used: record the ids, then acknowledge and delete the entries."""
        if not entries:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.sadd(keys.consumed_set(self.job_id), *[sample_id for _e, sample_id in entries])
        pipe.xack(self.stream, SAMPLE_GROUP, *[entry_id for entry_id, _s in entries])
        pipe.xdel(self.stream, *[entry_id for entry_id, _s in entries])
        pipe.execute()

    def discard(self, entry_ids: list[str]) -> None:
        """Acknowledge entries that will never be used (duplicates, over-stale samples)."""
        if entry_ids:
            pipe = self.client.pipeline(transaction=True)
            pipe.xack(self.stream, SAMPLE_GROUP, *entry_ids)
            pipe.xdel(self.stream, *entry_ids)
            pipe.execute()

    def forget_produced(self, sample_ids: list[str]) -> None:
        """Allow ids to be produced again (a dropped over-stale sample is regenerated under the same id)."""
        if sample_ids:
            self.client.srem(keys.produced_set(self.job_id), *sample_ids)

    def consumed_count(self) -> int:
        return int(self.client.scard(keys.consumed_set(self.job_id)))


def expire_job(client: redis.Redis, job_id: int, seconds: int = 86400) -> int:
    """Let every runtime key of an ended job expire (kept a while for inspection, never forever)."""
    found = list(client.scan_iter(match=keys.all_keys_pattern(job_id), count=500))
    pipe = client.pipeline(transaction=False)
    for key in found:
        pipe.expire(key, seconds)
    pipe.execute()
    return len(found)


def clear_job(client: redis.Redis, job_id: int) -> int:
    """Delete every runtime key of a job (after it ended or before a fresh start)."""
    found = list(client.scan_iter(match=keys.all_keys_pattern(job_id), count=500))
    return int(client.delete(*found)) if found else 0
