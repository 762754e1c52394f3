"""Weight versions published through the object store with the upload behind the trainer (workers/weightsync/
version_upload.py), on a real SeaweedFS (tests/object_store.py) and Redis: a reader on the writer's host (its content
cache) reads a version before its manifest is in the store; a reader on another host gets the complete version once
it is; a store that refuses the credentials fails the next publish, every reader waiting for the version and the
generation instance with the store's sentence."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import torch

from contract import keys
from contract.artifact_store import ArtifactStoreDenied, ArtifactStoreError, open_store, weights_prefix
from contract.artifact_store.base import ArtifactStore
from contract.reporter import JobRecord, MemoryReporter
from contract.spec import JobSpec
from contract.states import InstanceStatus, JobStatus
from workers.runtime import instance as instance_module
from workers.runtime.context import JobContext
from workers.weightsync.shared_store import SharedStoreTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3, shared_server  # noqa: E402

pytestmark = pytest.mark.integration
TEAM = 5


@pytest.fixture(scope="module")
def seaweed() -> SeaweedS3:
    return shared_server()


def host_store(seaweed: SeaweedS3, cache: Path, monkeypatch: pytest.MonkeyPatch, prefix: str,
               **env: str) -> ArtifactStore:
    for name, value in {**seaweed.env(), **env}.items():
        monkeypatch.setenv(name, value)
    return open_store(f"s3://streamrl/{prefix}", cache, retry_s=30)


def state(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((256, 64), value), "b": torch.arange(64, dtype=torch.float32) * value}


def test_same_host_reads_before_the_upload_and_another_host_after_it(
        seaweed: SeaweedS3, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        redis_client: redis.Redis, job_id: int) -> None:
    prefix = weights_prefix(TEAM, job_id)
    writer_store = host_store(seaweed, tmp_path / "a-cache", monkeypatch, "publish")
    stale = SharedStoreTransport(tmp_path / "dead", None, job_id, store=writer_store, store_prefix=prefix)
    stale.publish(1, state(-1.0))  # a dead driver epoch's v1, complete in the store
    stale.flush()
    release, real_upload = threading.Event(), writer_store._upload_file

    def slow_upload(source: Path, key: str) -> None:  # the upload stalls until the test lets it go
        release.wait(60)
        real_upload(source, key)

    monkeypatch.setattr(writer_store, "_upload_file", slow_upload)
    writer = SharedStoreTransport(tmp_path / "a", redis_client, job_id, template_dir=tiny_model_dir,
                                  store=writer_store, store_prefix=prefix)
    writer.publish(1, state(1.0))  # returns with the upload held
    assert writer.latest_version() == 1 and writer.uploads is not None and writer.uploads.in_flight
    assert writer_store.manifest(f"{prefix}/v000001") is None  # not in the store yet (the stale one retracted)

    # the writer's host: another process with its own weights dir, the host's cache
    same_host = SharedStoreTransport(tmp_path / "a2", redis_client, job_id,
                                     store=host_store(seaweed, tmp_path / "a-cache", monkeypatch, "publish"),
                                     store_prefix=prefix)
    got = same_host.fetch(1)
    assert torch.equal(got["w"], state(1.0)["w"]) and torch.equal(got["b"], state(1.0)["b"])
    assert (tmp_path / "a2" / "v000001" / "config.json").exists()  # a loadable HF directory
    assert writer_store.manifest(f"{prefix}/v000001") is None  # read before the manifest existed

    # another host: its own cache; it waits for the manifest, then downloads the complete version
    other_store = host_store(seaweed, tmp_path / "b-cache", monkeypatch, "publish")
    other = SharedStoreTransport(tmp_path / "b", redis_client, job_id, store=other_store, store_prefix=prefix)
    fetched: list[dict[str, torch.Tensor]] = []
    reader = threading.Thread(target=lambda: fetched.append(other.fetch(1)), daemon=True)
    reader.start()
    reader.join(timeout=1.0)
    assert reader.is_alive() and not fetched  # still waiting: this write of v1 is not in the store
    assert not (tmp_path / "b" / "v000001").exists()
    release.set()
    reader.join(timeout=60)
    assert fetched and torch.equal(fetched[0]["w"], state(1.0)["w"])
    assert sorted(p.name for p in (tmp_path / "b" / "v000001").iterdir()) == \
        sorted(p.name for p in (tmp_path / "a" / "v000001").iterdir())

    writer.publish(2, state(2.0))  # waits for v1's upload (done), announces v2, uploads it behind
    writer.flush()
    assert other.fetch(2)["b"][1].item() == 2.0
    writer.close()


def test_a_refused_upload_fails_the_next_publish_the_readers_and_the_instance_with_its_sentence(
        seaweed: SeaweedS3, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        redis_client: redis.Redis, job_id: int) -> None:
    """Credentials revoked between a publish's look at the store and its upload (the refusal is the real server's,
    replayed into the upload): readers stop waiting with the store's sentence, the next publish raises it."""
    from workers.runtime.driver import failure_message

    prefix = weights_prefix(TEAM, job_id)
    writer_store = host_store(seaweed, tmp_path / "a-cache", monkeypatch, "denied-weights")
    refused = host_store(seaweed, tmp_path / "x-cache", monkeypatch, "denied-weights", AWS_ACCESS_KEY_ID="not-a-key")
    with pytest.raises(ArtifactStoreDenied) as real_refusal:
        refused.versions(prefix)
    sentence = str(real_refusal.value)

    def revoked(source: Path, key: str) -> None:
        raise ArtifactStoreDenied(sentence)

    monkeypatch.setattr(writer_store, "_upload_file", revoked)
    writer = SharedStoreTransport(tmp_path / "a", redis_client, job_id, template_dir=tiny_model_dir,
                                  store=writer_store, store_prefix=prefix)
    writer.publish(1, state(1.0))  # announced; its upload is refused behind it

    # a reader on another host stops waiting with the store's sentence
    other = SharedStoreTransport(tmp_path / "b", redis_client, job_id,
                                 store=host_store(seaweed, tmp_path / "b-cache", monkeypatch, "denied-weights"),
                                 store_prefix=prefix)
    started = time.monotonic()
    with pytest.raises(ArtifactStoreDenied, match="denied the credentials"):
        other.fetch(1)
    assert time.monotonic() - started < 20  # told by the writer, not waiting out its bound
    # a reader without Redis (an `auto` instance following the store) waits a bounded time
    follower = SharedStoreTransport(tmp_path / "c", None, job_id, store=other.store, store_prefix=prefix,
                                    upload_wait_s=1.0)
    with pytest.raises(ArtifactStoreError, match="announced but is not in"):
        follower.local_path(1)

    with pytest.raises(ArtifactStoreDenied) as denied:  # the next publish: the job's reason, v2 never announced
        writer.publish(2, state(2.0))
    assert writer.latest_version() == 1
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["v000001"]  # no temporary directory left
    message, expected = failure_message(denied.value)
    assert expected and message == sentence
    assert message.startswith("artifact store s3://streamrl/denied-weights denied the credentials")

    # a generation instance whose store refuses it: the job fails at once with the sentence (no crash loop)
    spec = JobSpec.model_validate({"model": "tiny", "mode": "async", "dataset": {"builtin": "arithmetic"},
                                   "reward": {"type": "exact_match"}, "training": {"weight_sync": "shared_store"}})
    reporter = MemoryReporter()
    reporter.add_job(JobRecord(job_id=job_id, team_id=TEAM, spec=spec, status=JobStatus.running, model_path=None,
                               dataset_path=None))
    reporter.set_instance_status(job_id, "gen-0", InstanceStatus.starting)
    redis_client.set(keys.ptl_lock(job_id), 1)  # no PTL profile
    artifacts = tmp_path / "gen-host"
    ctx = JobContext(job_id=job_id, team_id=TEAM, spec=spec, model_dir=tiny_model_dir,
                     job_dir=artifacts / "jobs" / str(job_id), reporter=reporter, redis=redis_client)
    monkeypatch.setattr(instance_module, "load_context", lambda *args: ctx)
    for name, value in {**seaweed.env("streamrl/denied-weights"), "AWS_ACCESS_KEY_ID": "not-a-key"}.items():
        monkeypatch.setenv(name, value)
    said: Any = instance_module.run_instance(job_id, "gen-0", reporter, redis_client, artifacts)
    assert "denied the credentials" in said
    assert reporter.job_status(job_id) == JobStatus.failed
    assert reporter.errors[job_id].startswith("artifact store s3://streamrl/denied-weights denied the credentials")
    assert reporter.instance_states(job_id)["gen-0"] == InstanceStatus.dead
    assert redis_client.get(keys.job_done(job_id)) == b"failed"
