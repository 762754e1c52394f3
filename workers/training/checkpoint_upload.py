"""A checkpoint's upload to the artifact store, off the training loop.

The driver saves a checkpoint locally (the iteration waits for that alone), then `start`s its upload here: one
background thread per upload, at most one in flight per job (the driver `wait`s for it before its next checkpoint,
before a hand-back or pause checkpoint, and before it exits). The upload's manifest is still written last
(contract/artifact_store/base.py `put_dir`), so another host resuming meanwhile sees only the previous complete
checkpoint. A failed upload is retried (`attempts` tries, doubling backoff; denied credentials and a full store at
once are not) and its outcome is handed back to the driver's thread by `wait`/`poll`, which turns a failure into the
usual checkpoint event.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from contract.artifact_store import ArtifactStoreDenied, ArtifactStoreError, ArtifactStoreFull
from contract.artifact_store.checkpoints import CheckpointMirror


@dataclass
class UploadOutcome:
    iteration: int
    path: Path
    seconds: float
    error: ArtifactStoreError | None = None
    attempts: int = 1  # tries made (a denied or full store: one)

    @property
    def tries(self) -> str:
        """What was tried, as the checkpoint event says it."""
        if self.attempts == 1 and isinstance(self.error, ArtifactStoreDenied | ArtifactStoreFull):
            return "1 attempt: a denied or full store is not retried"
        return f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"


class BackgroundUpload:
    def __init__(self, mirror: CheckpointMirror, attempts: int = 3, backoff_s: float = 1.0) -> None:
        self.mirror, self.attempts, self.backoff_s = mirror, attempts, backoff_s
        self._thread: threading.Thread | None = None
        self._outcome: UploadOutcome | None = None

    @property
    def in_flight(self) -> bool:
        return self._thread is not None

    def start(self, iteration: int, path: Path) -> None:
        """Upload `path` in the background; the previous upload must have been collected (`wait`)."""
        if self._thread is not None:
            raise RuntimeError("a checkpoint upload is still in flight: wait() for it first")
        self._outcome = None
        self._thread = threading.Thread(target=self._run, args=(iteration, path), daemon=True,
                                        name=f"ckpt-upload-{path.name}")
        self._thread.start()

    def _run(self, iteration: int, path: Path) -> None:
        start, wait_s = time.perf_counter(), self.backoff_s
        error: ArtifactStoreError | None = None
        tried = 0
        for attempt in range(self.attempts):
            tried = attempt + 1
            try:
                self.mirror.upload(path)
                error = None
                break
            except (ArtifactStoreDenied, ArtifactStoreFull) as err:  # trying again changes nothing
                error = err
                break
            except ArtifactStoreError as err:  # unreachable past the store's own retry window
                error = err
                if attempt + 1 < self.attempts:
                    time.sleep(wait_s)
                    wait_s *= 2
            except Exception as err:  # a file vanished, a bug: still the checkpoint's failure, never the thread's
                error = ArtifactStoreError(f"{type(err).__name__}: {err}")
                break
        self._outcome = UploadOutcome(iteration, path, time.perf_counter() - start, error, tried)

    def wait(self) -> UploadOutcome | None:
        """Block until the in-flight upload ends; its outcome (None when there was none)."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread = None
        return self._outcome

    def poll(self) -> UploadOutcome | None:
        """The finished upload's outcome, None while it runs or when there is none."""
        if self._thread is None or self._thread.is_alive():
            return None
        return self.wait()
