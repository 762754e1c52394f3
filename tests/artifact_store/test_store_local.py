"""The artifact store's contract on the directory backend: manifest last, verified downloads, a bounded cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contract.artifact_store import MANIFEST, ArtifactStoreFull, checkpoint_key, checkpoints_prefix, open_store
from contract.artifact_store.cache import CacheCorrupt, ContentCache
from contract.artifact_store.checkpoints import CheckpointMirror
from contract.artifact_store.local import LocalDirStore


def write_version(directory: Path, payload: bytes) -> Path:
    (directory / "sub").mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(payload)
    (directory / "sub" / "config.json").write_text('{"a": 1}')
    return directory


def test_put_get_roundtrip_and_listing(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path / 'store'}", tmp_path / "cache")
    source = write_version(tmp_path / "src", os.urandom(5000))
    manifest = store.put_dir("teams/1/jobs/2/weights/v000001", source)
    assert set(manifest.files) == {"model.safetensors", "sub/config.json"}
    assert store.versions("teams/1/jobs/2/weights") == ["v000001"]
    got = store.get_dir("teams/1/jobs/2/weights/v000001", tmp_path / "host-b" / "v000001")
    assert (got / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    assert (got / "sub" / "config.json").read_text() == '{"a": 1}'
    assert store.versions("teams/1/jobs/3/weights") == []  # another job's prefix holds nothing
    store.delete("teams/1/jobs/2/weights/v000001")
    assert store.versions("teams/1/jobs/2/weights") == []
    assert not list((tmp_path / "store").rglob("model.safetensors"))


def test_a_version_without_its_manifest_is_invisible(tmp_path: Path) -> None:
    """The files of an interrupted upload are there, the manifest is not: no reader sees the version, and a resume
    restores the newest complete checkpoint."""
    store = LocalDirStore(tmp_path / "store", ContentCache(tmp_path / "cache"))
    store.put_dir(checkpoint_key(1, 5, "iter_000002"), write_version(tmp_path / "a", b"old"))
    partial = write_version(tmp_path / "b", b"partial") / "model.safetensors"
    store._upload_file(partial, checkpoint_key(1, 5, "iter_000004") + "/model.safetensors")
    assert store.versions(checkpoints_prefix(1, 5)) == ["iter_000002"]
    assert store.manifest(checkpoint_key(1, 5, "iter_000004")) is None
    with pytest.raises(FileNotFoundError):
        store.get_dir(checkpoint_key(1, 5, "iter_000004"), tmp_path / "out")
    restored = CheckpointMirror(store, team_id=1, job_id=5).restore(tmp_path / "ckpts")
    assert restored == tmp_path / "ckpts" / "iter_000002"
    assert (restored / "model.safetensors").read_bytes() == b"old"


def test_replacing_a_version_retracts_the_old_manifest_first(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", ContentCache(tmp_path / "cache"))
    store.put_dir("k/v000001", write_version(tmp_path / "a", b"first"))
    store.put_dir("k/v000001", write_version(tmp_path / "b", b"second"))
    got = store.get_dir("k/v000001", tmp_path / "out")
    assert (got / "model.safetensors").read_bytes() == b"second"


def test_cache_is_content_addressed_and_bounded(tmp_path: Path) -> None:
    cache = ContentCache(tmp_path / "cache", max_bytes=2500)
    store = LocalDirStore(tmp_path / "store", cache)
    for index in range(4):
        store.put_dir(f"w/v{index:06d}", write_version(tmp_path / f"s{index}", bytes([index]) * 1000))
    for index in range(4):
        store.get_dir(f"w/v{index:06d}", tmp_path / "reader" / f"v{index:06d}")
    assert cache.size() <= 2500  # the oldest entries went; the materialized directories did not
    for index in range(4):
        assert (tmp_path / "reader" / f"v{index:06d}" / "model.safetensors").read_bytes() == bytes([index]) * 1000
    # one content, two versions: one cache entry, hard-linked into both directories
    store.put_dir("w/v000009", write_version(tmp_path / "s9", bytes([3]) * 1000))
    again = store.get_dir("w/v000009", tmp_path / "reader" / "v000009")
    assert (again / "model.safetensors").stat().st_nlink >= 2


def test_a_corrupted_object_never_enters_the_cache(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", ContentCache(tmp_path / "cache"))
    store.put_dir("c/v000001", write_version(tmp_path / "a", b"good bytes"))
    (tmp_path / "store" / "c" / "v000001" / "model.safetensors").write_bytes(b"bad bytes!")
    with pytest.raises(CacheCorrupt, match="manifest says"):
        store.get_dir("c/v000001", tmp_path / "out")
    good_sha = store.manifest("c/v000001").files["model.safetensors"][0]  # type: ignore[union-attr]
    assert not (tmp_path / "out").exists() and not store.cache.path(good_sha).exists()
    assert all(p.read_bytes() != b"bad bytes!" for p in store.cache.entries())  # other files may be cached (valid)
    assert (tmp_path / "store" / "c" / "v000001" / MANIFEST).exists()


def test_a_full_disk_is_its_own_error(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path / "store", ContentCache(tmp_path / "cache"), retry_s=0.1)
    err = store._classify(OSError(28, "No space left on device"))
    assert isinstance(err, ArtifactStoreFull) and "is full" in str(err)


def test_bad_urls_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="STREAMRL_ARTIFACTS"):
        open_store("gs://bucket/x", tmp_path)
    with pytest.raises(ValueError, match="names its bucket"):
        open_store("s3:///x", tmp_path)
