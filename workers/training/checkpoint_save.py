"""Saving a checkpoint through transient and disk-full failures.

`save_retrying` makes `attempts` tries with exponential backoff. After each failed try the partial `<final>.tmp`
directory is removed, so a full disk is not made fuller by the attempt itself. Any exception counts as a failed
save: torch reports a full disk as `RuntimeError: [enforce fail at inline_container.cc:...] ... unexpected pos`,
safetensors as `SafetensorError(... StorageFull ...)`, plain writes as `OSError(ENOSPC)`. The reason given to the
user says "no space left on <dir>" when the error or the disk says so (read before the partial files are removed).
"""

from __future__ import annotations

import errno
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)
DISK_FULL_TEXTS = ("no space left", "storagefull", "storage full", "os error 28", "disk quota")
NEARLY_FULL_BYTES = 1 << 20  # a failed write with less than this free on the disk is taken for a full disk


class CheckpointSaveFailed(Exception):
    """Every attempt failed; the message is the user-facing reason ("checkpoint save failed: ...")."""


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def disk_full(err: BaseException, directory: Path) -> bool:
    """Whether `err` (or an error it was raised from) means the disk holding `directory` is full."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(seen).lower() for text in DISK_FULL_TEXTS):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(_existing(directory)).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def describe_failure(err: BaseException, directory: Path) -> str:
    if disk_full(err, directory):
        return f"checkpoint save failed: no space left on {directory}"
    reason = err.strerror if isinstance(err, OSError) and err.strerror else f"{type(err).__name__}: {err}"
    return f"checkpoint save failed: {reason} ({directory})"


def save_retrying(save: Callable[[], object], final: Path, *, attempts: int, backoff_s: float) -> None:
    """Run `save` (which writes `<final>.tmp` and renames it to `final`) until it succeeds; after the last failed
    attempt raise CheckpointSaveFailed. Waits backoff_s, 2 x backoff_s, ... between attempts."""
    staging = final.with_name(final.name + ".tmp")
    for attempt in range(attempts):
        try:
            save()
            return
        except Exception as err:
            reason = describe_failure(err, final.parent)
            shutil.rmtree(staging, ignore_errors=True)
            if attempt + 1 == attempts:
                raise CheckpointSaveFailed(reason) from err
            wait_s = backoff_s * 2**attempt
            log.warning("%s (attempt %d of %d: %s); retrying in %.0fs", reason, attempt + 1, attempts, err, wait_s)
            time.sleep(wait_s)
