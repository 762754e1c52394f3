"""The driver's prompt dispatcher on its seams: an in-memory reporter and in-memory prompt queues."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from contract.reporter import MemoryReporter
from contract.sample import PromptRequest, Sample
from contract.skew import PTLProfile, ptl_to_json
from contract.spec import JobSpec
from workers.core.prompts import PromptSchedule, TokenCache, iteration_of, request_seed
from workers.runtime.dispatching import PromptDispatcher


class ListQueue:
    def __init__(self) -> None:
        self.items: list[PromptRequest] = []

    def put(self, requests: list[PromptRequest]) -> None:
        self.items.extend(requests)

    def drain(self) -> list[PromptRequest]:
        out, self.items = self.items, []
        return out


class CountingReporter(MemoryReporter):
    def __init__(self) -> None:
        super().__init__()
        self.ptl_reads = 0

    def load_ptl(self, job_id: int) -> list[list[float]] | None:
        self.ptl_reads += 1
        return super().load_ptl(job_id)


def make(policy: str = "random", prompts: int = 6, group: int = 3) -> tuple[PromptDispatcher, dict[str, ListQueue],
                                                                           CountingReporter]:
    spec = JobSpec.model_validate({"model": "m", "dataset": {"builtin": "long_tail"}, "seed": 7,
                                   "algorithm": {"group_size": group}, "dispatch": {"policy": policy},
                                   "generation": {"batch_size": 12},
                                   "training": {"prompts_per_iteration": prompts}})
    rows = [{"prompt_id": f"p{i}", "prompt": "x" * (i + 1)} for i in range(10)]
    queues: dict[str, ListQueue] = defaultdict(ListQueue)
    reporter = CountingReporter()
    dispatcher = PromptDispatcher(spec, PromptSchedule(rows, spec), TokenCache(lambda t: [len(t)]), job_id=1,
                                  reporter=reporter, queues=lambda iid: queues[iid])
    return dispatcher, queues, reporter


def test_requests_have_deterministic_ids_seeds_and_epochs() -> None:
    dispatcher, _, _ = make()
    groups = dispatcher.requests_for(2, min_version=1)
    assert [len(g) for g in groups] == [3] * 6
    first = groups[0][0]
    assert first.sample_id == "2:0:0" and first.group_id == "2:0" and iteration_of(first.sample_id) == 2
    assert first.seed == request_seed(7, "2:0:0") and first.min_version == 1
    again, _, _ = make()
    same = again.requests_for(2, min_version=1)
    assert [[(r.sample_id, r.seed, r.prompt_ids) for r in g] for g in same] == \
        [[(r.sample_id, r.seed, r.prompt_ids) for r in g] for g in groups]
    # 10 rows, 6 per iteration: iterations 0 and 1 cover epoch 0 (rows 0..9 once) before epoch 1 starts
    seen = [r["prompt_id"] for it in (0, 1) for r in dispatcher.schedule.rows_for(it)][:10]
    assert sorted(seen) == sorted(f"p{i}" for i in range(10))


@pytest.mark.parametrize("policy", ["random", "round_robin", "skew_aware"])
def test_dispatch_sends_every_request_once_and_groups_whole(policy: str) -> None:
    dispatcher, queues, _ = make(policy)
    sent = dispatcher.dispatch(0, ["gen-1", "gen-2", "gen-3"], min_version=0)
    assert sent == 18
    ids = [r.sample_id for q in queues.values() for r in q.items]
    assert sorted(ids) == sorted(f"0:{s}:{k}" for s in range(6) for k in range(3))
    for queue in queues.values():  # all of a group's requests on one instance
        by_group: dict[str, int] = defaultdict(int)
        for r in queue.items:
            by_group[r.group_id] += 1
        assert set(by_group.values()) <= {3}
    assert dispatcher.touched == {iid for iid, q in queues.items() if q.items}
    assert set(dispatcher.predictions[0]) == {f"0:{s}" for s in range(6)}


def test_skew_aware_reads_the_ptl_profile_until_it_exists_then_keeps_it() -> None:
    dispatcher, _, reporter = make("skew_aware")
    dispatcher.dispatch(0, ["gen-1", "gen-2"], min_version=0)
    assert reporter.ptl_reads == 1 and not dispatcher.ptl_known
    reporter.save_ptl(1, ptl_to_json(PTLProfile(((1, 0.01), (12, 0.03)))))
    for it in (1, 2, 3):
        dispatcher.dispatch(it, ["gen-1", "gen-2"], min_version=0)
    assert reporter.ptl_reads == 2 and dispatcher.ptl_known
    assert dispatcher.policy.n_instances == 2


def test_send_spreads_longest_first_and_drain_returns_the_rest() -> None:
    dispatcher, queues, _ = make()
    loose = [PromptRequest(sample_id=f"0:{i}:0", group_id=f"0:{i}", prompt_id=f"p{i}", iteration=0, prompt_ids=[1],
                           predicted_len=float(i)) for i in range(5)]
    dispatcher.send(loose, ["a", "b"])
    assert [r.predicted_len for r in queues["a"].items] == [4.0, 2.0, 0.0]
    assert [r.predicted_len for r in queues["b"].items] == [3.0, 1.0]
    assert len(dispatcher.drain("a")) == 3 and "a" not in dispatcher.touched


def test_observe_refits_the_policys_ranker() -> None:
    dispatcher, _, _ = make()
    rows = dispatcher.schedule.rows_for(0)
    samples: list[Any] = [Sample(job_id=1, prompt_id=r["prompt_id"], group_id="0:0", sample_id=f"s{i}",
                                 policy_version=0, prompt_ids=[1], response_ids=[1] * (5 * len(r["prompt"])),
                                 behaviour_logprobs=[0.0] * (5 * len(r["prompt"])), finish_reason="stop",
                                 prompt_text=r["prompt"]) for i, r in enumerate(rows)]
    dispatcher.observe(samples)
    predicted = dispatcher.policy.predict(rows)
    longest = max(range(len(rows)), key=lambda i: len(rows[i]["prompt"]))
    assert max(range(len(rows)), key=lambda i: predicted[i]) == longest


@pytest.mark.parametrize("policy", ["skew_aware", "random"])
def test_each_iteration_records_how_many_instances_the_long_tail_got(policy: str) -> None:
    """Learned lengths rise steeply with the prompt and a small batch decodes much faster (a GPU-like profile):
    Algorithm 2 dedicates instances to the predicted long tail and the iteration's row says how many; random never."""
    dispatcher, queues, reporter = make(policy, prompts=10, group=1)
    rows = dispatcher.schedule.rows_for(0)
    lengths = {r["prompt_id"]: 4 if len(r["prompt"]) < 9 else 400 for r in rows}  # two prompts in ten are long
    dispatcher.observe([Sample(job_id=1, prompt_id=r["prompt_id"], group_id="0:0", sample_id=f"s{i}", policy_version=0,
                               prompt_ids=[1], response_ids=[1] * lengths[r["prompt_id"]],
                               behaviour_logprobs=[0.0] * lengths[r["prompt_id"]], finish_reason="stop",
                               prompt_text=r["prompt"]) for i, r in enumerate(rows)])
    reporter.save_ptl(1, ptl_to_json(PTLProfile(((1, 0.01), (12, 0.12)))))
    dispatcher.dispatch(1, ["gen-1", "gen-2", "gen-3", "gen-4"], min_version=0)
    got = dispatcher.long_tail_instances.pop(1)
    if policy == "random":
        assert got == 0
        return
    assert got >= 1
    long_ids = {f"p{i}" for i in (8, 9)}
    dedicated = [q.items for q in queues.values() if q.items and {r.prompt_id for r in q.items} <= long_ids]
    assert len(dedicated) == got  # the long-tail instances hold the long prompts and nothing else
