"""A store that fills up, on a real SeaweedFS (tests/object_store.py) with one 1 MB volume: SeaweedFS's S3 gateway
answers an upload it has no volume for with a bare 500 InternalError (its log says "No writable volumes and no free
volumes left"), so the client cannot tell it from a restart. The upload is retried for `retry_s`, then fails with a
sentence that says the server kept answering errors and that a full store answers so; the version's manifest is
never written (no reader sees the partial version), and what was already stored stays readable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from contract.artifact_store import ArtifactStoreError, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3  # noqa: E402

pytestmark = pytest.mark.integration


def test_a_full_seaweedfs_fails_the_upload_with_a_clear_sentence_and_no_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with SeaweedS3(tmp_path / "weed", volume_size_limit_mb=1, max_volumes=1) as s3:
        for name, value in s3.env("streamrl/full").items():
            monkeypatch.setenv(name, value)
        store = open_store("s3://streamrl/full", tmp_path / "cache", retry_s=2.0)
        small = tmp_path / "small"
        small.mkdir()
        (small / "a.bin").write_bytes(os.urandom(200_000))
        store.put_dir("teams/1/versions/1", small)  # fits
        big = tmp_path / "big"
        big.mkdir()
        for i in range(3):
            (big / f"part-{i}.bin").write_bytes(os.urandom(700_000))
        with pytest.raises(ArtifactStoreError) as failed:
            store.put_dir("teams/1/versions/2", big)
        message = str(failed.value)
        assert "kept answering errors" in message and "no room left" in message, message
        assert "s3://streamrl/full" in message
        assert store.manifest("teams/1/versions/2") is None  # never a half-written version
        assert store.versions("teams/1/versions") == ["1"]
        got = store.get_dir("teams/1/versions/1", tmp_path / "read")
        assert (got / "a.bin").read_bytes() == (small / "a.bin").read_bytes()
