"""The shared generation process itself (workers/runtime/shared.py) with real Redis streams, the real hf engine and the
runtime's memory reporter: a job that cannot run there (another base model) is refused with its reason while the
job beside it is served; each member streams only to its own job; a job that ends leaves, and the process exits
when nothing is placed on it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from waiting import wait_until

from contract import keys
from contract.reporter import JobRecord, MemoryReporter
from contract.sample import PromptRequest
from contract.spec import JobSpec
from contract.states import InstanceStatus, JobStatus
from workers.models import build_tiny_model
from workers.runtime.shared import SharedInstance
from workers.stream import PromptQueue, SampleStream, clear_job

pytestmark = [pytest.mark.integration]
INSTANCE = "gen-0"


def _spec() -> JobSpec:
    return JobSpec.model_validate({
        "model": "tiny", "mode": "sync", "dataset": {"builtin": "arithmetic"}, "reward": {"type": "exact_match"},
        "generation": {"batch_size": 4, "max_tokens": 6}, "training": {"lora": {"rank": 4}}})


def test_a_member_that_cannot_run_is_refused_and_the_others_are_served(
        redis_client: redis.Redis, tmp_path: Path) -> None:
    base, other = build_tiny_model("tiny-1m", tmp_path / "base"), build_tiny_model("tiny-1m", tmp_path / "other")
    served, refused = 700_000_001 + int(time.time()) % 1000 * 2, 700_000_002 + int(time.time()) % 1000 * 2
    reporter = MemoryReporter()
    for job_id, model in ((served, base), (refused, other)):
        reporter.add_job(JobRecord(job_id=job_id, team_id=job_id, spec=_spec(), status=JobStatus.running,
                                   model_path=str(model), dataset_path=None))
        reporter.set_instance_status(job_id, INSTANCE, InstanceStatus.starting)
        redis_client.rpush(keys.share_joins("test-key"), f'{{"job_id": {job_id}, "instance_id": "{INSTANCE}"}}')
    host = SharedInstance(redis_client, "test-key", reporter, tmp_path / "artifacts", node=None, device="cpu",
                          idle_s=2.0)
    outcome: list[str | BaseException] = []

    def serve() -> None:
        try:
            outcome.append(host.serve())
        except BaseException as err:  # reported by the assertions below instead of a timeout
            outcome.append(err)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        wait_until(lambda: reporter.instance_states(served).get(INSTANCE) == InstanceStatus.running or outcome, 120,
                   "the served job's member runs")
        assert reporter.instance_states(refused)[INSTANCE] == InstanceStatus.dead
        failure = reporter.instance_errors[refused][INSTANCE]
        assert "is not this shared instance's" in failure, failure
        prompt = PromptQueue(redis_client, served, INSTANCE)
        prompt.put([PromptRequest(sample_id=f"0:{i}:0", group_id=f"0:{i}", prompt_id=f"p{i}", iteration=0,
                                  prompt_ids=[1, 5, 6, 7], min_version=0, queued_at=time.time()) for i in range(6)])
        stream, got = SampleStream(redis_client, served), set()

        def all_samples() -> bool:
            got.update(s.sample_id for _, s in stream.read("test", count=16, block_ms=0))
            return len(got) == 6

        wait_until(all_samples, 120, "the served job's samples")
        assert not SampleStream(redis_client, refused).read("test", count=16, block_ms=0)
        assert redis_client.get(keys.share_state("test-key")) is not None  # the process beats while it serves
        redis_client.set(keys.job_done(served), "succeeded", ex=60)  # the job ends: its member leaves
        thread.join(timeout=60)
        assert outcome and isinstance(outcome[0], str), outcome  # then, with nothing placed, the process exits
        assert reporter.instance_states(served)[INSTANCE] == InstanceStatus.stopped
        assert redis_client.get(keys.share_state("test-key")) is None
    finally:
        host.state.stop()
        redis_client.delete(keys.share_joins("test-key"), keys.share_state("test-key"))
        for job_id in (served, refused):
            clear_job(redis_client, job_id)


def test_warm_shutdown_ends_an_idle_shared_process_and_hands_its_member_back(
        redis_client: redis.Redis, tmp_path: Path) -> None:
    """Ctrl-C of `streamrl up` (the worker's warm shutdown flag) with an idle shared process: its member hands its
    instance back and the process exits long before the 20 s SIGKILL, not after its idle_s (finding 13 of #36)."""
    base = build_tiny_model("tiny-1m", tmp_path / "base")
    job_id = 700_100_001 + int(time.time()) % 1000 * 2
    node, key = f"shutdown-test-{job_id}@host", f"test-key-{job_id}"
    reporter = MemoryReporter()
    reporter.add_job(JobRecord(job_id=job_id, team_id=job_id, spec=_spec(), status=JobStatus.running,
                               model_path=str(base), dataset_path=None))
    reporter.set_instance_status(job_id, INSTANCE, InstanceStatus.starting)
    redis_client.rpush(keys.share_joins(key), f'{{"job_id": {job_id}, "instance_id": "{INSTANCE}"}}')
    host = SharedInstance(redis_client, key, reporter, tmp_path / "artifacts", node=node, device="cpu", idle_s=120.0)
    outcome: list[str | BaseException] = []
    ended = threading.Event()

    def serve() -> None:
        try:
            outcome.append(host.serve())
        except BaseException as err:  # reported by the assertions below instead of a timeout
            outcome.append(err)
        ended.set()

    threading.Thread(target=serve, daemon=True).start()
    try:
        wait_until(lambda: reporter.instance_states(job_id).get(INSTANCE) == InstanceStatus.running or outcome, 120,
                   "the member runs")
        assert not outcome, outcome
        redis_client.set(keys.worker_shutdown(node), 1, ex=60)  # what the worker's main process does on SIGTERM
        started = time.monotonic()
        assert ended.wait(60), "the shared process did not exit on the worker's shutdown"
        took = time.monotonic() - started
        assert isinstance(outcome[0], str), outcome
        assert took < 10, f"the shared process took {took:.1f}s to exit (the worker kills it at 20 s)"
        assert reporter.instance_states(job_id)[INSTANCE] == InstanceStatus.stopped  # handed back, not dead
        assert redis_client.get(keys.share_state(key)) is None  # a placement now starts a process elsewhere
    finally:
        host.state.stop()
        redis_client.delete(keys.share_joins(key), keys.share_state(key), keys.worker_shutdown(node))
        clear_job(redis_client, job_id)
