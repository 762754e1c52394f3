"""A weight version's upload to the artifact store, behind the trainer (shared_store.py).

The publisher writes a version on its own disk, announces it to readers on its host (their content cache: they link
its files at once, contract/artifact_store/base.py `announce_local`) and in Redis, then uploads it here, one version at
a time per job. Invariants:
- Every announced version reaches the store, in order, or its error is raised: the next publish `wait`s for the
  previous upload before it announces its own version (it writes its files first), and a failed upload raises the
  store's error there, so the job fails with the store's sentence (as a publish that uploaded first did) and no later
  version is announced.
- A reader on another host sees a version only once its manifest is in the store (written last, as always): it waits
  for it, bounded (`await_version`), and learns of a failed upload from Redis (`failed_key`) rather than waiting out
  its bound.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from contract import keys
from contract.artifact_store import ArtifactStore, ArtifactStoreDenied, ArtifactStoreError, ArtifactStoreFull

log = logging.getLogger(__name__)
UPLOAD_WAIT_S = 300.0  # how long a reader on another host waits for an announced version's manifest
_KINDS: dict[str, type[ArtifactStoreError]] = {"denied": ArtifactStoreDenied, "full": ArtifactStoreFull,
                                               "error": ArtifactStoreError}


def failed_key(job_id: int) -> str:
    """Hash: version -> the store's error (kind, message) for a weight version whose upload failed."""
    return f"{keys.prefix(job_id)}:weights:upload_failed"


def _kind(err: ArtifactStoreError) -> str:
    """`err`'s name in `_KINDS` (its subclasses come before the base class there, so the first match is the closest)."""
    return next(name for name, cls in _KINDS.items() if isinstance(err, cls))


class VersionUploads:
    def __init__(self, store: ArtifactStore, client: redis.Redis | None, job_id: int) -> None:
        self.store, self.client, self.job_id = store, client, job_id
        self._thread: threading.Thread | None = None
        self._error: ArtifactStoreError | None = None
        self.seconds: list[float] = []  # each finished upload's duration (until its manifest was in the store)

    def start(self, version: int, key: str, source: Path, after: Callable[[], None] | None = None) -> None:
        """Upload `source` as `key` in the background (the previous upload was `wait`ed for); `after` runs once it
        is in the store (the store's pruning)."""
        if self._thread is not None:
            raise RuntimeError("a weight version upload is still in flight: wait() for it first")
        self._thread = threading.Thread(target=self._run, args=(version, key, source, after), daemon=True,
                                        name=f"weights-upload-v{version}")
        self._thread.start()

    def _run(self, version: int, key: str, source: Path, after: Callable[[], None] | None) -> None:
        start = time.perf_counter()
        try:
            # this host's cache gets the files too: once the announcement is withdrawn they are still linked
            self.store.put_dir(key, source, cache_files=True)
        except Exception as raw:  # a file vanished, a bug: still the version's failure, never the thread's
            err = raw if isinstance(raw, ArtifactStoreError) else ArtifactStoreError(f"{type(raw).__name__}: {raw}")
            self._error = err
            log.error("job %s: weights v%d upload failed: %s", self.job_id, version, err)
            if self.client is not None:  # readers on other hosts stop waiting and say the store's sentence
                try:
                    self.client.hset(failed_key(self.job_id), str(version),
                                     json.dumps({"kind": _kind(err), "message": str(err)}))
                    self.client.expire(failed_key(self.job_id), 86400)
                except redis.RedisError as lost:
                    log.warning("job %s: could not record the failed upload: %s", self.job_id, lost)
            return
        self.seconds.append(time.perf_counter() - start)
        if self.client is not None:  # a version published again (a restarted driver) uploaded this time
            with contextlib.suppress(redis.RedisError):
                self.client.hdel(failed_key(self.job_id), str(version))
        if after is not None:
            after()

    @property
    def in_flight(self) -> bool:
        return self._thread is not None

    def wait(self) -> None:
        """Block until the in-flight upload ends; raise its error (once)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        try:
            self.wait()
        except ArtifactStoreError as err:  # the job's outcome is decided: say what became of the last version
            log.error("job %s: last weight version upload: %s", self.job_id, err)


def await_version(store: ArtifactStore, key: str, version: int, client: redis.Redis | None, job_id: int,
                  timeout_s: float = UPLOAD_WAIT_S) -> None:
    """Block until the announced `version`'s manifest is in the store (its upload is behind the publish); raise the
    upload's error when it failed (recorded in Redis), ArtifactStoreError after `timeout_s`."""
    deadline, wait_s = time.monotonic() + timeout_s, 0.05
    while store.manifest(key) is None:
        if client is not None:
            raw = client.hget(failed_key(job_id), str(version))
            if raw is not None:
                failed = json.loads(raw)
                raise _KINDS.get(failed["kind"], ArtifactStoreError)(failed["message"])
        if time.monotonic() + wait_s > deadline:
            raise ArtifactStoreError(
                f"weights version {version} of job {job_id} was announced but is not in {store.url} after "
                f"{timeout_s:.0f}s: its upload from the trainer's host failed or is stalled (the job's events say why)")
        time.sleep(wait_s)
        wait_s = min(wait_s * 2, 1.0)
