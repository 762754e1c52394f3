"""Which store this process uses: STREAMRL_ARTIFACTS (see the package docstring), cached per process."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from contract.artifact_store.base import ArtifactStore
from contract.artifact_store.cache import DEFAULT_MAX_BYTES, ContentCache

CACHE_DIR_ENV = "STREAMRL_ARTIFACT_CACHE"  # default: <artifact dir>/cache/objects of this host
CACHE_BYTES_ENV = "STREAMRL_ARTIFACT_CACHE_BYTES"
RETRY_ENV = "STREAMRL_ARTIFACT_RETRY_S"


def open_store(url: str, cache_dir: Path, cache_bytes: int = DEFAULT_MAX_BYTES, retry_s: float = 60.0
               ) -> ArtifactStore:
    """The store `url` names (`s3://bucket/prefix`, `file:///dir` or a path), caching under `cache_dir`."""
    cache = ContentCache(cache_dir, cache_bytes)
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"STREAMRL_ARTIFACTS={url!r}: an s3 URL names its bucket (s3://bucket/prefix)")
        from contract.artifact_store.s3 import S3Store
        return S3Store(parsed.netloc, parsed.path, cache, retry_s=retry_s)
    if parsed.scheme in ("file", ""):
        from contract.artifact_store.local import LocalDirStore
        return LocalDirStore(Path(parsed.path if parsed.scheme else url), cache, retry_s=retry_s)
    raise ValueError(f"STREAMRL_ARTIFACTS={url!r}: use s3://bucket/prefix or file:///directory")


def artifact_store(artifact_dir: Path | None = None) -> ArtifactStore | None:
    """This process's store, None when STREAMRL_ARTIFACTS is unset (the shared artifact dir is used in place)."""
    url = os.environ.get("STREAMRL_ARTIFACTS", "").strip()
    if not url:
        return None
    cache_dir = os.environ.get(CACHE_DIR_ENV) or str((artifact_dir or Path("data/artifacts")) / "cache" / "objects")
    return _cached_store(url, cache_dir, int(os.environ.get(CACHE_BYTES_ENV) or DEFAULT_MAX_BYTES),
                         float(os.environ.get(RETRY_ENV) or 60.0))


@lru_cache(maxsize=4)
def _cached_store(url: str, cache_dir: str, cache_bytes: int, retry_s: float) -> ArtifactStore:
    return open_store(url, Path(cache_dir), cache_bytes, retry_s)
