"""Checkpoints and weight versions through S3-compatible object storage: a real SeaweedFS server (tests/object_store.py)
with two "hosts" that share nothing but the store (separate local directories and caches)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from training_fixtures import make_group, make_spec

from contract.artifact_store import (
    ArtifactStoreDenied,
    ArtifactStoreError,
    checkpoint_key,
    checkpoints_prefix,
    open_store,
    weights_prefix,
)
from contract.artifact_store.base import ArtifactStore
from contract.artifact_store.checkpoints import CheckpointMirror
from workers.training.trainer import Trainer
from workers.weightsync.shared_store import SharedStoreTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3, shared_server  # noqa: E402

pytestmark = pytest.mark.integration
TEAM, JOB = 3, 41


@pytest.fixture(scope="module")
def seaweed() -> SeaweedS3:
    return shared_server()  # one server for every module of the session (tests/object_store.py)


def host_store(seaweed: SeaweedS3, cache: Path, monkeypatch: pytest.MonkeyPatch, prefix: str,
               retry_s: float = 60.0) -> ArtifactStore:
    """One host's view of the store: its own cache directory, the credentials from the environment as in production."""
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    return open_store(f"s3://streamrl/{prefix}", cache, retry_s=retry_s)


def test_checkpoint_save_and_load_across_hosts(seaweed: SeaweedS3, tiny_model_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spec = make_spec(name="ppo", kl_coef=0.05)
    batch_a = make_group("a", [1.0, 0.0, 0.0, 1.0], seed=5) + make_group("b", [0.0, 1.0, 1.0, 1.0], seed=6)
    batch_b = make_group("c", [0.0, 0.0, 1.0, 0.0], seed=7) + make_group("d", [1.0, 0.5, 0.0, 0.2], seed=8)
    trainer = Trainer(tiny_model_dir, spec)
    trainer.train_iteration(batch_a)
    host_a = CheckpointMirror(host_store(seaweed, tmp_path / "a-cache", monkeypatch, "ckpt"), TEAM, JOB)
    host_a.upload(trainer.save_checkpoint(tmp_path / "host-a" / "iter_000001"))
    trainer.train_iteration(batch_b)

    # every object is under the team's prefix
    listed = seaweed.client().list_objects_v2(Bucket="streamrl", Prefix="ckpt/")["Contents"]
    assert listed and all(o["Key"].startswith(f"ckpt/teams/{TEAM}/jobs/{JOB}/checkpoints/iter_000001/")
                          for o in listed)
    assert any(o["Key"].endswith("/MANIFEST.json") for o in listed)

    host_b = CheckpointMirror(host_store(seaweed, tmp_path / "b-cache", monkeypatch, "ckpt"), TEAM, JOB)
    restored = host_b.restore(tmp_path / "host-b")
    assert restored == tmp_path / "host-b" / "iter_000001"
    resumed = Trainer(tiny_model_dir, spec)
    assert resumed.load_checkpoint(restored) == 1
    resumed.train_iteration(batch_b)  # the same step from the restored state: the same weights
    for (name, a), (_, b) in zip(trainer.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_weight_version_publish_and_fetch_across_hosts(seaweed: SeaweedS3, tiny_model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(tiny_model_dir, make_spec(name="grpo"))
    state = trainer.state_dict_for_sync()
    prefix = weights_prefix(TEAM, JOB)
    publisher = SharedStoreTransport(tmp_path / "a", None, JOB, template_dir=tiny_model_dir, keep=2,
                                     store=host_store(seaweed, tmp_path / "a-cache", monkeypatch, "w"),
                                     store_prefix=prefix)
    reader_store = host_store(seaweed, tmp_path / "b-cache", monkeypatch, "w")
    reader = SharedStoreTransport(tmp_path / "b", None, JOB, follow_disk=True, store=reader_store, store_prefix=prefix)
    for version in (1, 2, 3):
        publisher.publish(version, state)  # each waits for the previous version's upload, then announces its own
    assert reader.latest_version() in (2, 3)  # another host sees only complete versions: v3's upload runs behind
    publisher.flush()
    assert reader.latest_version() == 3
    fetched = reader.fetch(3)
    assert set(fetched) == set(state) and all(torch.equal(fetched[k], state[k]) for k in state)
    assert (tmp_path / "b" / "v000003" / "config.json").exists()  # a loadable HF directory on the reader's host
    assert reader_store.versions(prefix) == ["v000002", "v000003"]  # pruned in the store too (keep=2)
    # the reader's cache is content-addressed: an identical version is not downloaded again
    entries = set(reader_store.cache.entries())
    publisher.publish(4, state)
    reader.fetch(4)
    assert set(reader_store.cache.entries()) == entries


def test_server_restarted_mid_checkpoint(seaweed: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server is killed after the first file of a checkpoint: the upload waits for it and completes; a server
    that stays down fails the upload, and the partial version is never listed (no manifest)."""
    source = tmp_path / "iter_000005"
    source.mkdir()
    for name in ("a.bin", "b.bin", "c.bin"):
        (source / name).write_bytes(torch.randint(0, 255, (3 << 20,), dtype=torch.uint8).numpy().tobytes())
    store = host_store(seaweed, tmp_path / "cache", monkeypatch, "restart", retry_s=60)
    mirror = CheckpointMirror(store, TEAM, JOB)
    uploaded: list[str] = []
    real_upload = store._upload_file
    restarter: list[threading.Thread] = []

    def upload_then_kill(path: Path, key: str) -> None:
        real_upload(path, key)
        uploaded.append(key)
        if len(uploaded) == 1:
            seaweed.stop()  # kill -9 between two files of the checkpoint
            restarter.append(threading.Thread(target=seaweed.start))
            restarter[0].start()

    monkeypatch.setattr(store, "_upload_file", upload_then_kill)
    mirror.upload(source)
    restarter[0].join()
    assert len(uploaded) == 3 and mirror.names() == ["iter_000005"]
    restored = CheckpointMirror(host_store(seaweed, tmp_path / "b-cache", monkeypatch, "restart"), TEAM, JOB) \
        .restore(tmp_path / "host-b")
    assert restored is not None
    assert all((restored / n).read_bytes() == (source / n).read_bytes() for n in ("a.bin", "b.bin", "c.bin"))

    # the server goes down mid-checkpoint and stays down past the retry window
    short = host_store(seaweed, tmp_path / "cache2", monkeypatch, "restart", retry_s=1.5)
    partial = tmp_path / "iter_000010"
    partial.mkdir()
    for name in ("a.bin", "b.bin"):
        (partial / name).write_bytes(b"x" * 1000 + name.encode())
    real_short = short._upload_file
    calls: list[str] = []

    def kill_after_first(path: Path, key: str) -> None:
        if calls:
            seaweed.stop()
        calls.append(key)
        real_short(path, key)

    monkeypatch.setattr(short, "_upload_file", kill_after_first)
    monkeypatch.setattr("contract.artifact_store.base.FILES_IN_FLIGHT", 1)  # the first file lands before the kill
    started = time.monotonic()
    with pytest.raises(ArtifactStoreError, match="unreachable"):
        CheckpointMirror(short, TEAM, JOB).upload(partial)
    assert time.monotonic() - started < 30
    seaweed.start()
    keys = [o["Key"] for o in seaweed.client().list_objects_v2(Bucket="streamrl", Prefix="restart/").get("Contents",
                                                                                                       [])]
    assert any("iter_000010/a.bin" in k for k in keys)  # the part that made it is there...
    assert not any("iter_000010/MANIFEST.json" in k for k in keys)  # ...but never its manifest
    assert mirror.names() == ["iter_000005"]
    assert mirror.restore(tmp_path / "host-c") == tmp_path / "host-c" / "iter_000005"


def test_denied_credentials_are_a_clear_error(seaweed: SeaweedS3, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = open_store("s3://streamrl/denied", tmp_path / "cache", retry_s=30)
    source = tmp_path / "iter_000001"
    source.mkdir()
    (source / "x.bin").write_bytes(b"1")
    started = time.monotonic()
    with pytest.raises(ArtifactStoreDenied) as denied:
        CheckpointMirror(store, TEAM, JOB).upload(source)
    assert time.monotonic() - started < 10  # not retried as if transient
    assert "denied the credentials" in str(denied.value) and "AWS_SECRET_ACCESS_KEY" in str(denied.value)
    with pytest.raises(ArtifactStoreDenied):
        store.versions(checkpoints_prefix(TEAM, JOB))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    assert open_store("s3://streamrl/denied", tmp_path / "c2").manifest(checkpoint_key(TEAM, JOB, "iter_000001")) \
        is None


def test_denied_credentials_mid_run_are_the_jobs_reason(seaweed: SeaweedS3, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight version's publish refused by the real server (a wrong access key): the publish fails at once (its
    first look at the store), leaves no version behind, and the failed job's error is the store's sentence (no type
    name, no traceback). An upload refused behind the publish: tests/integration/test_weights_publish_store.py."""
    from workers.runtime.driver import failure_message

    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-a-key")
    store = open_store("s3://streamrl/denied-publish", tmp_path / "cache", retry_s=30)
    transport = SharedStoreTransport(tmp_path / "weights", None, JOB, store=store,
                                     store_prefix=weights_prefix(TEAM, JOB))
    started = time.monotonic()
    with pytest.raises(ArtifactStoreDenied) as denied:
        transport.publish(1, {"w": torch.ones(4)})
    assert time.monotonic() - started < 10  # not retried as if transient
    assert list((tmp_path / "weights").iterdir()) == []  # no version, no temporary directory
    message, expected = failure_message(denied.value)
    assert expected and message == str(denied.value)
    assert message.startswith("artifact store s3://streamrl/denied-publish denied the credentials")
    assert "AWS_ACCESS_KEY_ID" in message


def test_another_hosts_download_is_whole_and_verified(seaweed: SeaweedS3, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another host's download (multipart ranges): an empty file, one of exactly one part and one a byte over come
    back whole; an object whose bytes differ from the manifest never enters the cache and nothing is materialized."""
    from contract.artifact_store.cache import CacheCorrupt
    from contract.artifact_store.s3 import CHUNK_BYTES

    source = tmp_path / "v1"
    source.mkdir()
    sizes = {"empty.bin": 0, "one-range.bin": CHUNK_BYTES, "over.bin": CHUNK_BYTES + 1, "small.json": 7}
    for name, size in sizes.items():
        (source / name).write_bytes(torch.randint(0, 255, (size,), dtype=torch.uint8).numpy().tobytes())
    key = weights_prefix(TEAM, JOB) + "/v000001"
    host_store(seaweed, tmp_path / "a-cache", monkeypatch, "ranged").put_dir(key, source)
    reader = host_store(seaweed, tmp_path / "b-cache", monkeypatch, "ranged")
    got = reader.get_dir(key, tmp_path / "b" / "v000001")
    assert all((got / n).read_bytes() == (source / n).read_bytes() for n in sizes)

    seaweed.client().put_object(Bucket="streamrl", Key=f"ranged/{key}/over.bin", Body=b"\0" * (CHUNK_BYTES + 1))
    other = host_store(seaweed, tmp_path / "c-cache", monkeypatch, "ranged")
    with pytest.raises(CacheCorrupt):
        other.get_dir(key, tmp_path / "c" / "v000001")
    assert not (tmp_path / "c" / "v000001").exists()
    assert sorted(p.stat().st_size for p in other.cache.entries()) == [0, 7, CHUNK_BYTES]  # never the bad one
