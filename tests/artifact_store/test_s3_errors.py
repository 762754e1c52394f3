"""How the S3 backend names what a server answered (contract/artifact_store/s3.py `_classify`), and what a background
checkpoint upload reports for it: a full bucket or denied credentials are one clear sentence, at once, never retried
as if the server were restarting; a 5xx or a refused connection is retried. The server's answers are botocore's own
exception types (the same objects boto3 raises), no server needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError, EndpointConnectionError

from contract.artifact_store import ArtifactStoreDenied, ArtifactStoreFull
from contract.artifact_store.base import TransientStoreError
from contract.artifact_store.cache import ContentCache
from contract.artifact_store.checkpoints import CheckpointMirror
from contract.artifact_store.s3 import S3Store
from workers.training.checkpoint_upload import BackgroundUpload


def _answer(code: str, status: int, message: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> S3Store:
    """One client for the module (building a boto3 client costs seconds on a loaded 2-core machine); no request
    reaches its endpoint (nothing listens on port 9)."""
    return S3Store("bucket", "team-prefix", ContentCache(tmp_path_factory.mktemp("s3-errors-cache")), retry_s=0.5,
                   endpoint_url="http://127.0.0.1:9")


@pytest.mark.parametrize(("raised", "kind", "words"), [
    (_answer("QuotaExceeded", 403, "bucket quota"), ArtifactStoreFull, "is full (QuotaExceeded)"),
    (_answer("XMinioAdminBucketQuotaExceeded", 400), ArtifactStoreFull, "raise the bucket's quota"),
    (_answer("InternalError", 500, "No writable volume"), ArtifactStoreFull, "is full"),
    (_answer("InsufficientStorage", 507), ArtifactStoreFull, "free space"),
    (_answer("SignatureDoesNotMatch", 403), ArtifactStoreDenied, "AWS_SECRET_ACCESS_KEY"),
    (_answer("AccessDenied", 403), ArtifactStoreDenied, "denied the credentials (AccessDenied)"),
    (_answer("NoSuchBucket", 404), ArtifactStoreDenied, "bucket 'bucket' does not exist"),
])
def test_full_and_denied_are_named(store: S3Store, raised: Exception, kind: type, words: str) -> None:
    err = store._classify(raised)
    assert isinstance(err, kind) and words in str(err) and "s3://bucket/team-prefix" in str(err)
    wrapped = S3UploadFailedError("Failed to upload x to bucket/y: An error occurred")  # the transfer manager's
    wrapped.__cause__ = raised
    assert isinstance(store._classify(wrapped), kind)


def test_a_restarting_server_is_transient(store: S3Store) -> None:
    assert isinstance(store._classify(_answer("ServiceUnavailable", 503)), TransientStoreError)
    assert isinstance(store._classify(EndpointConnectionError(endpoint_url="http://127.0.0.1:9")), TransientStoreError)


def test_the_transfer_managers_words_are_read_when_it_keeps_no_cause(store: S3Store) -> None:
    """boto3's upload_file raises S3UploadFailedError with the answer only in its message (no __cause__)."""
    def failed(code: str) -> S3UploadFailedError:
        return S3UploadFailedError(f"Failed to upload /x to bucket/y: An error occurred ({code}) when calling the "
                                   "PutObject operation (reached max retries: 3): some words")

    server = store._classify(failed("InternalError"))
    assert isinstance(server, TransientStoreError) and server.answered  # answered: its final sentence says so
    assert isinstance(store._classify(failed("AccessDenied")), ArtifactStoreDenied)
    assert isinstance(store._classify(failed("QuotaExceeded")), ArtifactStoreFull)
    unreachable = store._classify(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert isinstance(unreachable, TransientStoreError) and not unreachable.answered


def test_a_full_bucket_fails_the_upload_once_with_its_reason(store: S3Store, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def full(source: str, bucket: str, key: str, **kwargs: object) -> None:
        calls.append(key)
        raise S3UploadFailedError("Failed to upload") from _answer("QuotaExceeded", 403, "bucket quota exceeded")

    def no_manifest(**kwargs: object) -> None:
        raise store.client.exceptions.NoSuchKey({"Error": {"Code": "NoSuchKey"}}, "GetObject")

    monkeypatch.setattr(store.client, "upload_file", full)
    monkeypatch.setattr(store.client, "get_object", no_manifest)
    monkeypatch.setattr(store.client, "put_object", lambda **kw: pytest.fail("a manifest for a partial version"))
    source = tmp_path / "iter_000004"
    source.mkdir()
    (source / "model.safetensors").write_bytes(os.urandom(64))
    uploads = BackgroundUpload(CheckpointMirror(store, 3, 9), attempts=3, backoff_s=0.01)
    uploads.start(4, source)
    done = uploads.wait()
    assert done is not None and isinstance(done.error, ArtifactStoreFull) and done.attempts == 1
    assert done.tries == "1 attempt: a denied or full store is not retried"  # the checkpoint event's words
    assert str(done.error) == ("artifact store s3://bucket/team-prefix is full (QuotaExceeded): free space or raise "
                               "the bucket's quota")  # the sentence the job's checkpoint event carries
    assert calls == ["team-prefix/teams/3/jobs/9/checkpoints/iter_000004/model.safetensors"]  # tried once
