"""The S3-compatible backend (AWS S3, SeaweedFS, MinIO, GCS's XML API) through boto3.

Files above `MULTIPART_BYTES` are uploaded in parts (boto3's transfer manager, `CHUNK_BYTES` a part, several in
flight); an interrupted upload leaves no object, and no manifest names it. Endpoint and credentials come from the
usual variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, profiles, ...).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contract.artifact_store.base import (
    FILES_IN_FLIGHT,
    ArtifactStore,
    ArtifactStoreDenied,
    ArtifactStoreFull,
    TransientStoreError,
)
from contract.artifact_store.cache import ContentCache

MULTIPART_BYTES = 16 << 20
CHUNK_BYTES = 16 << 20
PARTS_IN_FLIGHT = 8  # per file; several files go at once too (base.py FILES_IN_FLIGHT)
# what selects a client: boto3 reads the credentials from these (then profiles, instance metadata, ...)
CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
DENIED_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                "AllAccessDisabled", "AccountProblem", "403"}
SERVER_ERROR_CODES = {"SlowDown", "RequestTimeout", "ServiceUnavailable", "InternalError"}
ANSWER_CODE = re.compile(r"An error occurred \((\w+)\)")  # botocore's words for a server's answer
FULL_CODES = {"QuotaExceeded", "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded", "InsufficientStorage",
              "StorageFull", "507"}
FULL_TEXTS = ("quota", "no space", "storage full", "no writable volume", "not enough space")


@functools.lru_cache(maxsize=16)
def _client(endpoint: str | None, region: str, *credentials: str | None) -> Any:
    """A boto3 S3 client for `endpoint` with the credentials boto3 resolves now (`credentials`: the variables it
    reads them from, so that changed credentials get a client of their own); boto3 clients are thread-safe."""
    import boto3  # only a store that uses S3 imports boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=60,
                    s3={"addressing_style": "path", "payload_signing_enabled": False} if endpoint
                    else {"payload_signing_enabled": False},
                    max_pool_connections=FILES_IN_FLIGHT * PARTS_IN_FLIGHT + 4,
                    # the manifest's sha256 verifies every download (and the upload: a reader checks it), so no
                    # second checksum per request, and no sha256 of each part's payload for its signature (botocore
                    # signs payloads over plain http by default: a second pass over every byte in this process)
                    request_checksum_calculation="when_required", response_checksum_validation="when_required")
    # a session of its own: boto3's default session keeps the credentials it resolved first
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config, region_name=region)


class S3Store(ArtifactStore):
    def __init__(self, bucket: str, prefix: str, cache: ContentCache, retry_s: float = 60.0,
                 endpoint_url: str | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        super().__init__(cache, retry_s)
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        region = os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        # one client (and connection pool) per endpoint and credentials in the process: every store of this process
        # (each cache directory is a store) shares it; credentials from the environment as boto3 reads them
        self.client: Any = _client(endpoint, region, *(os.environ.get(name) for name in CREDENTIAL_VARS))
        self.transfer = TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=CHUNK_BYTES,
                                       max_concurrency=PARTS_IN_FLIGHT, use_threads=True)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _upload_file(self, source: Path, key: str) -> None:
        self.client.upload_file(str(source), self.bucket, self._key(key), Config=self.transfer)

    def _put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def _get_bytes(self, key: str) -> bytes | None:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self.client.exceptions.NoSuchKey:
            return None
        data: bytes = response["Body"].read()
        return data

    def _download_file(self, key: str, dest: Path) -> None:
        self.client.download_file(self.bucket, self._key(key), str(dest), Config=self.transfer)

    def _list_keys(self, prefix: str) -> Iterator[str]:
        full = self._key(prefix)
        strip = len(self._key(""))
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
            for item in page.get("Contents", []):
                yield item["Key"][strip:]

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[start:start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def share_url(self, key: str, expires_s: int = 3600) -> str | None:
        url: str = self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket,
                                                                            "Key": self._key(key)},
                                                      ExpiresIn=expires_s)
        return url

    def _classify(self, err: Exception) -> Exception:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )
        from s3transfer.exceptions import RetriesExceededError

        cause: BaseException = err
        if isinstance(err, S3UploadFailedError) and err.__cause__ is not None:
            cause = err.__cause__  # the transfer manager wraps the ClientError
        text = f"{err} {cause}" if cause is not err else str(err)  # a wrapped answer's words count too
        if isinstance(cause, NoCredentialsError):
            return ArtifactStoreDenied(f"artifact store {self.url}: no credentials (set AWS_ACCESS_KEY_ID and "
                                       f"AWS_SECRET_ACCESS_KEY)")
        if isinstance(cause, ClientError):
            error = cause.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            # a quota is refused with 400 or 403 by some servers: the full codes and texts are tried first
            if code in FULL_CODES or status == 507 or any(t in text.lower() for t in FULL_TEXTS):
                return ArtifactStoreFull(f"artifact store {self.url} is full ({code or status}): free space or "
                                         f"raise the bucket's quota")
            if code in DENIED_CODES or status == 403:
                return ArtifactStoreDenied(f"artifact store {self.url} denied the credentials ({code or status}): "
                                           f"check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy")
            if code == "NoSuchBucket":
                return ArtifactStoreDenied(f"artifact store {self.url}: bucket {self.bucket!r} does not exist")
            if status >= 500 or code in SERVER_ERROR_CODES:
                return TransientStoreError(text, answered=True)
            return err
        if isinstance(cause, S3UploadFailedError):  # the transfer manager keeps only the answer's words
            answered = ANSWER_CODE.search(text)
            code = answered.group(1) if answered else ""
            if code in FULL_CODES or any(t in text.lower() for t in FULL_TEXTS):
                return ArtifactStoreFull(f"artifact store {self.url} is full ({code or 'its words'}): free space or "
                                         f"raise the bucket's quota")
            if code in DENIED_CODES:
                return ArtifactStoreDenied(f"artifact store {self.url} denied the credentials ({code}): check "
                                           f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy")
            return TransientStoreError(text, answered=code in SERVER_ERROR_CODES)
        if isinstance(cause, EndpointConnectionError | ConnectionClosedError | ReadTimeoutError | ConnectionError
                      | RetriesExceededError):
            return TransientStoreError(text)
        if "Connection" in type(cause).__name__ or "could not connect" in text.lower():
            return TransientStoreError(text)
        return err
