"""PromptQueue / SampleStream on a real Redis: ack after use, reclaim from dead consumers, idempotent ids."""

from __future__ import annotations

import time

import redis

from contract.sample import Sample
from workers.stream import PromptQueue, PromptRequest, SampleStream


def _request(i: int) -> PromptRequest:
    return PromptRequest(sample_id=f"s{i}", group_id=f"g{i // 2}", prompt_id=f"p{i // 2}", iteration=0,
                         prompt_ids=[1, 2, 3])


def _sample(job_id: int, sid: str) -> Sample:
    return Sample(job_id=job_id, prompt_id="p", group_id="g", sample_id=sid, policy_version=0, prompt_ids=[1],
                  response_ids=[2, 3], behaviour_logprobs=[-0.1, -0.2], finish_reason="stop")


def test_prompt_queue_acks_and_reclaims_from_dead_consumer(redis_client: redis.Redis, job_id: int) -> None:
    queue = PromptQueue(redis_client, job_id, "inst-0", reclaim_after_s=0.2)
    queue.put(_request(i) for i in range(4))
    first = queue.read("dead", count=3)
    assert [r.sample_id for _, r in first] == ["s0", "s1", "s2"]
    queue.ack([first[0][0]])  # the dead consumer finished s0 only
    assert queue.backlog() == 3
    fresh = queue.read("alive", count=10)
    assert [r.sample_id for _, r in fresh] == ["s3"]  # s1, s2 are still pending on "dead", not yet idle enough
    queue.ack([fresh[0][0]])
    time.sleep(0.3)
    reclaimed = queue.read("alive", count=10)
    assert sorted(r.sample_id for _, r in reclaimed) == ["s1", "s2"]
    queue.ack([e for e, _ in reclaimed])
    assert queue.backlog() == 0


def test_prompt_queue_drain_returns_unfinished(redis_client: redis.Redis, job_id: int) -> None:
    queue = PromptQueue(redis_client, job_id, "inst-1")
    queue.put(_request(i) for i in range(3))
    got = queue.read("c", count=1)
    queue.ack([got[0][0]])
    assert sorted(r.sample_id for r in queue.drain()) == ["s1", "s2"]
    assert queue.backlog() == 0


def test_sample_stream_is_idempotent_by_sample_id(redis_client: redis.Redis, job_id: int) -> None:
    stream = SampleStream(redis_client, job_id, reclaim_after_s=0.2)
    assert stream.publish(_sample(job_id, "a"))
    assert not stream.publish(_sample(job_id, "a"))  # a reclaimed request regenerated: not streamed twice
    assert stream.publish(_sample(job_id, "b"))
    got = stream.read("trainer-dead", count=10)
    assert [s.sample_id for _, s in got] == ["a", "b"]
    time.sleep(0.3)  # the trainer died before using them: a restarted one reclaims both
    again = stream.read("trainer-new", count=10, block_ms=10)
    assert [s.sample_id for _, s in again] == ["a", "b"]
    stream.commit([(e, s.sample_id) for e, s in again])
    assert stream.is_consumed("a") and stream.consumed_count() == 2
    assert stream.read("trainer-new", count=10, block_ms=10) == []


def test_forget_produced_allows_regeneration(redis_client: redis.Redis, job_id: int) -> None:
    stream = SampleStream(redis_client, job_id)
    assert stream.publish(_sample(job_id, "x"))
    [(entry, _)] = stream.read("t", count=1)
    stream.discard([entry])  # over-stale: dropped
    stream.forget_produced(["x"])
    assert stream.publish(_sample(job_id, "x"))


def test_reading_a_drained_prompt_queue_returns_nothing(redis_client: redis.Redis, job_id: int) -> None:
    queue = PromptQueue(redis_client, job_id, "inst-2")
    queue.put([_request(0)])
    assert len(queue.drain()) == 1  # the driver moved the requests elsewhere and deleted the stream
    assert queue.read("c", count=5) == []
    queue.put([_request(1)])
    assert [r.sample_id for _, r in queue.read("c", count=5)] == ["s1"]


def test_collector_groups_dedups_and_drops_over_stale(redis_client: redis.Redis, job_id: int) -> None:
    from workers.runtime.collector import SampleCollector

    stream = SampleStream(redis_client, job_id)
    collector = SampleCollector(stream, group_size=2, max_staleness=1)

    def sample(sid: str, version: int) -> Sample:
        s = _sample(job_id, sid)
        s.group_id, s.policy_version = sid.rsplit(":", 1)[0], version
        return s

    for s in (sample("3:0:0", 2), sample("3:0:1", 1), sample("3:1:0", 3)):  # iteration 3, group 0 complete
        stream.publish(s)
    assert collector.poll(block_ms=10, min_version=3) == 2  # 3:0:1 has staleness 2 > 1: dropped
    assert collector.stats.stale_dropped == 1
    [regen] = collector.take_regenerations()
    assert regen.sample_id == "3:0:1" and regen.min_version == 3
    assert not stream.already_produced("3:0:1")  # may be streamed again under the same id
    assert collector.pop_complete(3) == []
    stream.publish(sample("3:0:1", 3))
    stream.publish(sample("3:0:0", 3))  # a duplicate of a held sample (e.g. a re-dispatched request)
    collector.poll(block_ms=10, min_version=3)
    [group] = collector.pop_complete(3)
    assert sorted(h.sample.sample_id for h in group) == ["3:0:0", "3:0:1"]
    collector.commit(group, iteration=3)
    assert stream.is_consumed("3:0:0") and stream.consumed_count() == 2
    assert collector.stats.duplicates == 0  # the producer side refused the duplicate id (already produced)


def test_publishing_a_sample_acknowledges_its_prompt_in_the_same_step(redis_client: redis.Redis, job_id: int) -> None:
    """One round trip per finished sample: the sample is streamed once and its prompt entry acknowledged and
    deleted, also when the id was streamed before (a reclaimed request another instance finished)."""
    queue = PromptQueue(redis_client, job_id, "inst-3", reclaim_after_s=0.2)
    stream = SampleStream(redis_client, job_id)
    queue.put(_request(i) for i in range(3))
    entries = queue.read("c", count=3)
    assert stream.publish_finished(queue, [(_sample(job_id, "s0"), entries[0][0])]) == 1
    assert queue.backlog() == 2
    assert stream.publish_finished(queue, [(_sample(job_id, "s0"), entries[1][0])]) == 0  # duplicate: not streamed
    assert queue.backlog() == 1
    time.sleep(0.3)  # the acknowledged entries are never reclaimed; the third one is
    assert [r.sample_id for _, r in queue.read("other", count=5)] == ["s2"]
    assert [s.sample_id for _, s in stream.read("t", count=10, block_ms=10)] == ["s0"]
    assert stream.produced_among(["s0", "s1", "s2"]) == {"s0"} and stream.produced_among([]) == set()


def test_a_batch_of_finished_samples_is_one_atomic_step(redis_client: redis.Redis, job_id: int) -> None:
    """What an instance streams in one round trip: new ids are added once, a duplicate is skipped, and every prompt
    entry of the batch is acknowledged and deleted."""
    queue = PromptQueue(redis_client, job_id, "inst-4")
    stream = SampleStream(redis_client, job_id)
    queue.put(_request(i) for i in range(4))
    entries = queue.read("c", count=4)
    assert stream.publish(_sample(job_id, "s1"))  # another instance streamed s1 already
    finished = [(_sample(job_id, request.sample_id), entry_id) for entry_id, request in entries[:3]]
    assert stream.publish_finished(queue, finished) == 2  # s0, s2 new; s1 not streamed twice
    assert queue.backlog() == 1
    assert sorted(s.sample_id for _, s in stream.read("t", count=10, block_ms=10)) == ["s0", "s1", "s2"]
    assert stream.publish_finished(queue, []) == 0
