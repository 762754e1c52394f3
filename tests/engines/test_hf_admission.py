"""Batched admission in the hf continuous batcher, and the shared lazily consumed RequestFeed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.feed import RequestFeed
from workers.generation.engines.hf import HFEngine


def req(i: int, n: int = 3) -> GenerationRequest:
    return GenerationRequest(str(i), [5, 6, 7 + i % 5], SamplingParams(temperature=0, max_tokens=n))


def test_feed_pulls_at_most_room_and_stops_at_none_without_reading_ahead() -> None:
    consumed: list[int] = []

    def source() -> Iterator[GenerationRequest | None]:
        for i, item in enumerate([req(0), req(1), None, req(2), req(3)]):
            consumed.append(i)
            yield item

    feed = RequestFeed(source())
    pulled, idle = feed.pull(1)
    assert [r.request_id for r in pulled] == ["0"] and not idle and consumed == [0]
    pulled, idle = feed.pull(5)
    assert [r.request_id for r in pulled] == ["1"] and idle and consumed == [0, 1, 2]
    assert feed.pull(0) == ([], False) and consumed == [0, 1, 2]
    pulled, idle = feed.pull(5)
    assert [r.request_id for r in pulled] == ["2", "3"] and not idle and feed.exhausted
    assert feed.pull(5) == ([], False)


@pytest.fixture()
def engine(model_dir: Path) -> HFEngine:
    engine = setup_engine("hf", model_dir=model_dir, max_batch_size=8, device="cpu")
    assert isinstance(engine, HFEngine)
    return engine


def reference_greedy(engine: HFEngine, prompt_ids: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt_ids])
    out = engine.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                                pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def test_short_requests_behind_a_long_one_are_admitted_in_batches_and_stay_exact(engine: HFEngine) -> None:
    # one long request keeps the batch busy while 2-token requests churn through the other 7 slots
    lengths = [30] + [2 + i % 3 for i in range(20)]
    requests = [GenerationRequest(str(i), engine.encode(f"rep {i} ab:"), SamplingParams(temperature=0, max_tokens=n))
                for i, n in enumerate(lengths)]
    batcher = engine._batcher()
    assert batcher.min_free_slots == 2  # max_batch_size // 4
    results = list(batcher.run(requests))
    assert sorted(int(r.request_id) for r in results) == list(range(len(lengths)))
    for r in results:
        assert len(r.response_ids) == lengths[int(r.request_id)]
        assert r.response_ids == reference_greedy(engine, r.prompt_ids, len(r.response_ids))
    assert results[-1].request_id == "0"
    sizes = batcher.prefill_sizes
    assert sum(sizes) == len(lengths)
    assert sizes[0] == 8 and all(n >= 2 for n in sizes[1:-1])  # no one-row prefills while the feed lasts
    assert len(sizes) < len(lengths) // 2


def test_min_free_slots_one_admits_at_every_free_slot(engine: HFEngine) -> None:
    engine.max_batch_size = 2
    batcher = engine._batcher()
    assert batcher.min_free_slots == 1
    results = list(batcher.run([req(0, 12), req(1), req(2), req(3)]))
    assert [r.request_id for r in results] == ["1", "2", "3", "0"]
    assert batcher.prefill_sizes == [2, 1, 1]
