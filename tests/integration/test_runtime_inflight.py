"""In-flight weight updates in the instance loop (real Redis, real HF engine, real shared-store weights) and the
collector's staleness bound on mixed-version samples.

partial_rollouts true: a request in flight when weights v1 arrive continues on them (its sample records both versions)
and the next request is admitted beside it. false (drain): the instance admits nothing until that request has
finished on v0, so no sample spans two. (The engine-level test, tests/engines/test_inflight_updates.py, pins the
marks of a spanning sequence deterministically.) Unset: the hf engine's default, draining, said in the job's events."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from safetensors.torch import load_file, save_file
from waiting import wait_until

from contract import keys
from contract.reporter import MemoryReporter
from contract.sample import PromptRequest, Sample
from contract.spec import JobSpec
from contract.states import InstanceStatus
from contract.version_marks import token_versions
from workers.models import build_tiny_model
from workers.runtime.collector import SampleCollector
from workers.runtime.context import JobContext
from workers.runtime.instance import InstanceRunner
from workers.stream import PromptQueue, SampleStream
from workers.stream.redis_streams import PROMPT_GROUP
from workers.weightsync import SharedStoreTransport

INSTANCE = "gen-0"
LONG = 200  # response tokens of every request (EOS never wins): the first is still decoding when v1 is due


def no_eos_model(target: Path, seed: int) -> Path:
    """A tiny model whose EOS logit is zeroed: every response runs to max_tokens."""
    build_tiny_model("tiny-1m", target, seed=seed)
    state = load_file(target / "model.safetensors")
    head = state["lm_head.weight"] * 8.0
    head[2] = 0.0
    state["lm_head.weight"] = head
    save_file(state, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("inflight")
    return no_eos_model(root / "v0", 1), no_eos_model(root / "v1", 2)


def request(i: int, min_version: int, prompt_ids: list[int]) -> PromptRequest:
    return PromptRequest(sample_id=f"0:{i}:0", group_id=f"0:{i}", prompt_id=f"p{i}", iteration=0,
                         prompt_ids=prompt_ids, min_version=min_version, queued_at=time.time())


@pytest.mark.parametrize("partial", [True, False, None], ids=["partial", "drain", "hf-default"])
def test_instance_in_flight_update(partial: bool | None, models: tuple[Path, Path], tmp_path: Path,
                                   redis_client: redis.Redis, job_id: int) -> None:
    v0, v1 = models
    spec = JobSpec.model_validate({
        "model": "tiny", "mode": "async", "dataset": {"builtin": "arithmetic"}, "reward": {"type": "exact_match"},
        "generation": {"batch_size": 4, "max_tokens": LONG, "temperature": 0, "partial_rollouts": partial},
        "training": {"weight_sync": "shared_store"}})
    reporter = MemoryReporter()
    reporter.set_instance_status(job_id, INSTANCE, InstanceStatus.starting)
    redis_client.set(keys.ptl_lock(job_id), 1)  # no PTL profile: the test times the decode itself
    ctx = JobContext(job_id=job_id, team_id=1, spec=spec, model_dir=v0, job_dir=tmp_path / "job", reporter=reporter,
                     redis=redis_client)
    runner, errors = InstanceRunner(ctx, INSTANCE), []

    def run() -> None:
        try:
            runner.run()
        except Exception as err:  # reported below: the test fails with it instead of timing out
            errors.append(err)
            raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: reporter.instance_states(job_id).get(INSTANCE) == InstanceStatus.running or errors, 120,
                   "running")
        assert not errors, errors
        queue, prompt = PromptQueue(redis_client, job_id, INSTANCE), [1, 5, 6, 7]
        queue.put([request(0, 0, prompt)])
        wait_until(lambda: "0:0:0" in runner.in_flight, 120, "the first request in flight", poll_s=0.002)
        queue.put([request(1, 1, prompt)])  # a request that needs the trainer's next version, v1 ...
        wait_until(lambda: redis_client.xpending(queue.stream, PROMPT_GROUP)["pending"] == 2, 120,
                   "the instance to read the second request", poll_s=0.002)
        assert "0:0:0" in runner.in_flight  # (partial: the feed waits for v1 while the first request waits in turn)
        store = SharedStoreTransport(ctx.weights_dir, redis_client, job_id, template_dir=v0)
        store.publish_dir(1, v1)  # ... published while the first request is in flight
        stream = SampleStream(redis_client, job_id)
        got: dict[str, Sample] = {}

        def both() -> bool:
            got.update((s.sample_id, s) for _, s in stream.read("test", count=8, block_ms=0))
            return len(got) == 2 or errors

        wait_until(both, 300, "both samples")
        assert not errors, errors
    finally:
        runner.stop.set()
        thread.join(timeout=60)
    first, second = got["0:0:0"], got["0:1:0"]
    assert len(first.response_ids) == len(second.response_ids) == LONG
    assert second.policy_version == 1 and second.version_marks is None
    if partial:  # v1 was loaded while the first request was in flight, and the second was admitted beside it
        assert second.started_at < first.finished_at
        if first.version_marks is not None:  # it had started on v0 and continued on v1: counted at v0, the oldest
            [[_, oldest], [switch, newest]] = first.version_marks
            assert (oldest, newest, first.policy_version) == (0, 1, 0) and 0 < switch < LONG
        else:  # both were prefilled together, after v1 arrived (the feed reads on within one admission)
            assert first.policy_version == 1
    else:  # drained: the first finished on v0 alone, the second was admitted after it
        assert first.version_marks is None and first.policy_version == 0
        assert second.started_at >= first.finished_at
    defaults = [event for event in reporter.events.get(job_id, []) if event["kind"] == "generation_defaults"]
    if partial is None:
        [event] = defaults
        assert event["data"] == {"instance": INSTANCE, "partial_rollouts": False}
        assert "in-flight weight updates off (draining)" in event["message"] and "hf engine" in event["message"]
    else:
        assert not defaults  # the job chose: nothing to report


def mixed(job_id: int, sid: str, marks: list[list[int]]) -> Sample:
    return Sample(job_id=job_id, prompt_id="p", group_id=sid.rsplit(":", 1)[0], sample_id=sid,
                  policy_version=min(v for _, v in marks), prompt_ids=[1], response_ids=[5] * 8,
                  behaviour_logprobs=[-0.5] * 8, finish_reason="length",
                  version_marks=marks if len(marks) > 1 else None)


def test_max_staleness_bounds_the_oldest_token(redis_client: redis.Redis, job_id: int) -> None:
    """Iteration 3 trains at version 3; max_staleness 1: a sample whose first tokens came from v1 is dropped (and
    regenerated) even though most of its tokens are from v2; the trained samples have no token older than v2."""
    stream = SampleStream(redis_client, job_id)
    collector = SampleCollector(stream, group_size=2, max_staleness=1)
    for sample in (mixed(job_id, "3:0:0", [[0, 2], [3, 3]]), mixed(job_id, "3:0:1", [[0, 1], [2, 2]]),
                   mixed(job_id, "3:1:0", [[0, 2]]), mixed(job_id, "3:1:1", [[0, 2], [7, 3]])):
        stream.publish(sample)
    assert collector.poll(block_ms=10, min_version=3) == 3
    assert collector.stats.stale_dropped == 1 and [r.sample_id for r in collector.take_regenerations()] == ["3:0:1"]
    [group] = collector.pop_complete(3)
    trained = [h.sample for h in group]
    assert sorted(s.sample_id for s in trained) == ["3:1:0", "3:1:1"]
    for sample in trained:
        assert min(token_versions(sample.version_marks, len(sample.response_ids), sample.policy_version)) >= 3 - 1
