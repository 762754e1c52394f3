"""A checkpoint uploaded behind the training loop (workers/training/checkpoint_upload.py) and a published version
entering the writer's content cache: on the directory backend, with the failures injected into its upload."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from contract.artifact_store import ArtifactStoreError, ArtifactStoreFull, checkpoint_key, open_store
from contract.artifact_store.checkpoints import CheckpointMirror
from contract.artifact_store.local import LocalDirStore
from workers.training.checkpoint_upload import BackgroundUpload


def write_version(directory: Path, payload: bytes) -> Path:
    (directory / "sub").mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(payload)
    (directory / "sub" / "config.json").write_text('{"a": 1}')
    return directory


def test_upload_runs_in_the_background_and_the_manifest_comes_last(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(f"file://{tmp_path / 'store'}", tmp_path / "cache")
    mirror = CheckpointMirror(store, 1, 2)
    source = write_version(tmp_path / "ckpt" / "iter_000003", os.urandom(4000))
    release = threading.Event()
    real = store._upload_file

    def held(path: Path, key: str) -> None:
        release.wait(30)
        real(path, key)

    monkeypatch.setattr(store, "_upload_file", held)
    uploads = BackgroundUpload(mirror, attempts=2, backoff_s=0.01)
    uploads.start(3, source)  # returns at once: the loop goes on
    assert uploads.in_flight and uploads.poll() is None
    assert mirror.names() == []  # nothing readable before the manifest
    with pytest.raises(RuntimeError, match="still in flight"):
        uploads.start(4, source)
    release.set()
    done = uploads.wait()
    assert done is not None and done.error is None and done.iteration == 3
    assert mirror.names() == ["iter_000003"] and not uploads.in_flight
    assert uploads.wait() is None  # collected once


def test_a_failed_upload_is_retried_then_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(f"file://{tmp_path / 'store'}", tmp_path / "cache")
    mirror = CheckpointMirror(store, 1, 2)
    source = write_version(tmp_path / "ckpt" / "iter_000005", os.urandom(4000))
    calls: list[str] = []
    real = store._upload_file

    def flaky(path: Path, key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise ArtifactStoreError("artifact store unreachable for 60s")  # past the store's own retries
        real(path, key)

    monkeypatch.setattr(store, "_upload_file", flaky)
    uploads = BackgroundUpload(mirror, attempts=3, backoff_s=0.01)
    uploads.start(5, source)
    done = uploads.wait()
    assert done is not None and done.error is None and mirror.names() == ["iter_000005"]
    assert done.attempts == 2  # the event says what was tried

    def full(path: Path, key: str) -> None:
        calls.append(key)
        raise ArtifactStoreFull("artifact store is full")

    monkeypatch.setattr(store, "_upload_file", full)
    before = len(calls)
    other = write_version(tmp_path / "ckpt" / "iter_000006", os.urandom(4000))
    uploads.start(6, other)
    failed = uploads.wait()
    assert failed is not None and isinstance(failed.error, ArtifactStoreFull) and failed.attempts == 1
    tried = calls[before:]
    assert tried and len(tried) == len(set(tried))  # one attempt (files in parallel): a full store is not retried
    assert store.manifest(checkpoint_key(1, 2, "iter_000006")) is None


def test_published_files_enter_the_writers_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader on the writer's host (same cache, another directory) downloads nothing; it still needs the
    manifest in the store, and a reader with its own cache downloads and verifies."""
    writer = open_store(f"file://{tmp_path / 'store'}", tmp_path / "host-a-cache")
    source = write_version(tmp_path / "src", os.urandom(6000))
    writer.put_dir("teams/1/jobs/2/weights/v000001", source, cache_files=True)
    assert len(writer.cache.entries()) == 2
    manifest = writer.manifest("teams/1/jobs/2/weights/v000001")
    assert manifest is not None
    assert os.path.samefile(writer.cache.path(manifest.files["model.safetensors"][0]), source / "model.safetensors")

    def no_download(key: str, dest: Path) -> None:
        raise AssertionError(f"downloaded {key}")

    same_host = open_store(f"file://{tmp_path / 'store'}", tmp_path / "host-a-cache")
    monkeypatch.setattr(same_host, "_download_file", no_download)
    got = same_host.get_dir("teams/1/jobs/2/weights/v000001", tmp_path / "reader" / "v000001")
    assert (got / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    with pytest.raises(FileNotFoundError):  # cached files without a manifest are no version
        same_host.get_dir("teams/1/jobs/2/weights/v000002", tmp_path / "reader" / "v000002")
    other_host = LocalDirStore(tmp_path / "store", open_store(f"file://{tmp_path / 'x'}", tmp_path / "b-cache").cache)
    got_b = other_host.get_dir("teams/1/jobs/2/weights/v000001", tmp_path / "host-b" / "v000001")
    assert (got_b / "sub" / "config.json").read_text() == '{"a": 1}' and len(other_host.cache.entries()) == 2
