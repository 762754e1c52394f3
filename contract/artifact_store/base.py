"""The store's contract, shared by both backends: versions are directories written file by file, then a manifest.

Invariants:
- A version (a checkpoint, a weight version) is readable iff `<key>/MANIFEST.json` exists; it is written after every
  file it lists, and deleted before them, so a reader never sees a half-written or half-deleted version.
- The manifest lists each file's sha256 and size: readers verify what they download and cache it by content.
- A version may also be announced on its writer's host before its upload (`announce_local`): readers that share the
  host's content cache link its files from the writer's directory (`get_local`); readers elsewhere see it only once
  its manifest is in the store.
- Transient failures (connection refused or reset while the server restarts, 5xx, throttling) are retried with
  backoff for up to `retry_s`; denied credentials and a full store are raised at once as their own errors, whose
  messages are what the user reads in the job's events.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from contract.artifact_store.cache import ContentCache, file_sha256

log = logging.getLogger(__name__)
MANIFEST = "MANIFEST.json"
FILES_IN_FLIGHT = 4
T = TypeVar("T")


class ArtifactStoreError(RuntimeError):
    """The store could not do what was asked; the message says why in the user's terms."""


class ArtifactStoreDenied(ArtifactStoreError):
    """The store refused the credentials (or their permissions)."""


class ArtifactStoreFull(ArtifactStoreError):
    """The store (bucket, quota, disk) has no room left."""


class TransientStoreError(Exception):
    """Raised by a backend's `_classify` for errors worth retrying. `answered`: the server answered with an error (a
    5xx) rather than not being reachable."""

    def __init__(self, text: str, answered: bool = False) -> None:
        super().__init__(text)
        self.answered = answered


@dataclass(frozen=True)
class Manifest:
    files: dict[str, tuple[str, int]]  # relative path -> (sha256 hex, size)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files.values())

    def to_json(self) -> bytes:
        return json.dumps({"files": {p: {"sha256": h, "size": s} for p, (h, s) in sorted(self.files.items())},
                           "written_at": time.time()}).encode()

    @staticmethod
    def from_json(raw: bytes) -> Manifest:
        files = json.loads(raw)["files"]
        return Manifest({p: (f["sha256"], int(f["size"])) for p, f in files.items()})


def _files_of(directory: Path, names: list[str] | None = None) -> list[str]:
    """The relative paths of the files under `directory` (or of `names` in it), sorted."""
    chosen = [directory / n for n in names] if names is not None else directory.rglob("*")
    return [path.relative_to(directory).as_posix() for path in sorted(p for p in chosen if p.is_file())]


def manifest_of(directory: Path, names: list[str] | None = None) -> Manifest:
    return Manifest({rel: (file_sha256(directory / rel), (directory / rel).stat().st_size)
                     for rel in _files_of(directory, names)})


class ArtifactStore(ABC):
    """Versioned directories under string keys (`teams/3/jobs/7/checkpoints/iter_000010`)."""

    url: str  # what STREAMRL_ARTIFACTS said, for messages

    def __init__(self, cache: ContentCache, retry_s: float = 60.0) -> None:
        self.cache, self.retry_s = cache, retry_s

    # -- what a backend provides ---------------------------------------------------------------------------------------
    @abstractmethod
    def _upload_file(self, source: Path, key: str) -> None: ...

    @abstractmethod
    def _put_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _get_bytes(self, key: str) -> bytes | None:
        """The object's bytes, None when there is no such object."""

    @abstractmethod
    def _download_file(self, key: str, dest: Path) -> None: ...

    @abstractmethod
    def _list_keys(self, prefix: str) -> Iterator[str]: ...

    @abstractmethod
    def _delete_keys(self, keys: list[str]) -> None: ...

    @abstractmethod
    def share_url(self, key: str, expires_s: int = 3600) -> str | None:
        """A URL anyone holding it can download the object from (presigned), None when the backend has none."""

    def _classify(self, err: Exception) -> Exception:
        """`err` as ArtifactStoreDenied / ArtifactStoreFull / TransientStoreError, or `err` itself (not retried)."""
        return err

    # -- the contract --------------------------------------------------------------------------------------------------
    def _retrying(self, what: str, op: Callable[[], T]) -> T:
        deadline, wait_s = time.monotonic() + self.retry_s, 0.25
        while True:
            try:
                return op()
            except Exception as raw:
                err = self._classify(raw)
                if not isinstance(err, TransientStoreError):
                    if err is raw:
                        raise
                    raise err from raw
                if time.monotonic() + wait_s > deadline:
                    if err.answered:  # some servers answer a full disk this way, with no word of it
                        raise ArtifactStoreError(
                            f"artifact store {self.url} kept answering errors for {self.retry_s:.0f}s while {what}: "
                            f"{raw}; a store with no room left can answer so (SeaweedFS: 'internal error' once no "
                            f"volume is writable): check its free space") from raw
                    raise ArtifactStoreError(f"artifact store {self.url} unreachable for {self.retry_s:.0f}s while "
                                             f"{what}: {raw}") from raw
                log.warning("artifact store %s: %s failed (%s); retrying in %.2fs", self.url, what, raw, wait_s)
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, 5.0)

    def put_dir(self, key: str, source: Path, names: list[str] | None = None, cache_files: bool = False
                ) -> Manifest:
        """Upload every file under `source` (or the files `names` in it) to `<key>/...`, then the manifest. A version
        already complete under `key` is replaced: its manifest goes first, so no reader mixes old and new files.
        `cache_files`: the files also enter this host's content cache (hard links; they must never be rewritten in
        place), so a reader on this host materializes the version without downloading it, once the manifest is
        in the store (a reader still reads the manifest from the store: the version is visible when it is there)."""
        files = _files_of(source, names)
        if self.manifest(key) is not None:
            self.retract(key)
        # each file is hashed while it uploads (two readers of the same page-cached file; hashlib and the transfer
        # release the GIL), rather than every file hashed before the first byte goes out
        with ThreadPoolExecutor(max_workers=FILES_IN_FLIGHT) as hashing, \
                ThreadPoolExecutor(max_workers=FILES_IN_FLIGHT) as uploading:  # each file's parts go in parallel too
            hashes = {rel: hashing.submit(file_sha256, source / rel) for rel in files}
            uploads = [uploading.submit(self._upload_retrying, source / rel, f"{key}/{rel}") for rel in files]
            manifest = Manifest({rel: (hashes[rel].result(), (source / rel).stat().st_size) for rel in files})
            if cache_files:  # before the manifest: a reader here that sees the version finds its files cached
                for rel, (sha, _) in manifest.files.items():
                    self.cache.adopt(source / rel, sha)
            for done in uploads:
                done.result()
        self._retrying(f"writing {key}/{MANIFEST}", lambda: self._put_bytes(f"{key}/{MANIFEST}", manifest.to_json()))
        return manifest

    def retract(self, key: str) -> None:
        """Make the version under `key` invisible (its manifest goes; its files stay until `delete` or a `put_dir`)."""
        self._retrying(f"retracting {key}", lambda: self._delete_keys([f"{key}/{MANIFEST}"]))

    def _upload_retrying(self, source: Path, key: str) -> None:
        self._retrying(f"uploading {key}", lambda: self._upload_file(source, key))

    def _download_retrying(self, key: str, dest: Path) -> None:
        self._retrying(f"downloading {key}", lambda: self._download_file(key, dest))

    def manifest(self, key: str) -> Manifest | None:
        raw = self._retrying(f"reading {key}/{MANIFEST}", lambda: self._get_bytes(f"{key}/{MANIFEST}"))
        return None if raw is None else Manifest.from_json(raw)

    def versions(self, prefix: str) -> list[str]:
        """Names of the complete versions directly under `prefix` (those with a manifest), sorted."""
        start = prefix.rstrip("/") + "/"
        names = []
        listed: list[str] = self._retrying(f"listing {start}", lambda: list(self._list_keys(start)))
        for key in listed:
            rest = key[len(start):]
            name, _, tail = rest.partition("/")
            if tail == MANIFEST:
                names.append(name)
        return sorted(names)

    def get_dir(self, key: str, dest: Path) -> Path:
        """Materialize the version under `key` as the directory `dest` (through the content cache); raises
        FileNotFoundError when no complete version is there."""
        manifest = self.manifest(key)
        if manifest is None:
            raise FileNotFoundError(f"no complete version at {self.url}/{key}")
        staging = dest.with_name(f"{dest.name}.get-{uuid.uuid4().hex[:8]}")
        def fetch(rel: str, sha: str, size: int) -> None:
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            for attempt in range(2):  # a bounded cache may evict an entry before it is linked (another file's get)
                cached = self.cache.get(sha, size, functools.partial(self._download_retrying, f"{key}/{rel}"))
                try:
                    self.cache.materialize(cached, target)
                    return
                except FileNotFoundError:
                    if attempt:
                        raise

        try:
            with ThreadPoolExecutor(max_workers=FILES_IN_FLIGHT) as pool:  # files in parallel, as put_dir
                for done in [pool.submit(fetch, rel, sha, size) for rel, (sha, size) in manifest.files.items()]:
                    done.result()
            if dest.exists():
                shutil.rmtree(dest)
            staging.mkdir(parents=True, exist_ok=True)
            os.rename(staging, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return dest

    # -- this host's versions before their upload ----------------------------------------------------------------------
    def _announcement(self, key: str) -> Path:
        """Where a version written on this host is announced: in the content cache, so exactly the readers that share
        the cache (the host's) see it; per store URL, as keys are."""
        return self.cache.root / "announced" / hashlib.sha1(self.url.encode()).hexdigest()[:16] / f"{key}.json"

    def announce_local(self, key: str, source: Path) -> None:
        """Make the complete directory `source` readable as version `key` by readers sharing this host's cache, before
        (or without) its upload. `source`'s files are never rewritten in place, and `withdraw_local` comes before
        `source` is removed; a reader that finds a file gone falls back to the store."""
        sizes = {rel: (source / rel).stat().st_size for rel in _files_of(source)}
        note = self._announcement(key)
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.with_name(f".{note.name}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(json.dumps({"path": str(source.resolve()), "files": sizes}))
        os.replace(tmp, note)

    def withdraw_local(self, key: str) -> None:
        self._announcement(key).unlink(missing_ok=True)

    def local_versions(self, prefix: str) -> list[str]:
        """Names of the versions directly under `prefix` announced on this host (uploaded or not), sorted."""
        folder = self._announcement(prefix.rstrip("/") + "/x").parent
        return sorted(p.name.removesuffix(".json") for p in folder.glob("*.json")) if folder.is_dir() else []

    def get_local(self, key: str, dest: Path) -> bool:
        """Materialize the version `key` announced on this host as `dest` (hard links to the writer's files, copies
        across filesystems); False when it is not announced here or its files are gone (pruned meanwhile)."""
        try:
            note = json.loads(self._announcement(key).read_text())
        except FileNotFoundError:
            return False
        source = Path(note["path"])
        staging = dest.with_name(f"{dest.name}.local-{uuid.uuid4().hex[:8]}")
        try:
            for rel, size in note["files"].items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                self.cache.materialize(source / rel, target)
                if target.stat().st_size != size:  # never a file of another write under the same name
                    return False
            if dest.exists():
                shutil.rmtree(dest)
            os.rename(staging, dest)
            return True
        except OSError:
            return False
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def delete(self, key: str) -> None:
        """Retract the version (manifest first), then remove its files."""
        self._retrying(f"deleting {key}/{MANIFEST}", lambda: self._delete_keys([f"{key}/{MANIFEST}"]))
        rest: list[str] = self._retrying(f"listing {key}/", lambda: list(self._list_keys(f"{key}/")))
        if rest:
            self._retrying(f"deleting {key}/", lambda: self._delete_keys(rest))
