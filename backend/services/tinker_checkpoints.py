"""Tinker checkpoint lifetimes and visibility (docs/tinker.md#checkpoints): `ttl_seconds`, `user_metadata`,
`publish` / `unpublish` and `delete` of the saves under `<artifacts>/tinker/<team>/<job>/<kind>/<name>`.

    write_meta(directory, ttl_seconds=3600, user_metadata={...})   # at save_state / save_weights_for_sampler
    meta = read_meta(directory)           # {"expires_at": epoch s or None, "public": bool, "user_metadata": {...}}
    check_access(job, directory, key_id)  # 404 unless the run's own key or published; an expired save is gone
    sweep_expired(artifacts)              # the controller: expired saves deleted from disk

Each save's settings live in a sidecar `<name>.meta.json` next to its directory (the worker rewrites the directory;
the API owns the sidecar). Invariants: an expired save answers 404 and is missing from lists from the moment it
expires, before the controller's sweep deletes it; an unpublished save is loadable only with the API key that
created its training run; a published one with every key of that team; another team's is always a 404.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from backend.db.models import Job

log = logging.getLogger(__name__)
META_SUFFIX = ".meta.json"
MAX_TTL_S = 10 * 365 * 86400
MAX_METADATA = 64  # user_metadata entries
MAX_METADATA_CHARS = 1000  # per key or value


class CheckpointError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code, self.message = status_code, message


def meta_path(directory: Path) -> Path:
    return directory.parent / f"{directory.name}{META_SUFFIX}"


def check_ttl(ttl_seconds: Any) -> int | None:
    if ttl_seconds is None:
        return None
    if not isinstance(ttl_seconds, int) or isinstance(ttl_seconds, bool) or not 1 <= ttl_seconds <= MAX_TTL_S:
        raise CheckpointError(400, f"ttl_seconds must be an integer from 1 to {MAX_TTL_S} (or None: never expires), "
                                   f"not {str(ttl_seconds)[:40]}")
    return ttl_seconds


def check_metadata(user_metadata: Any) -> dict[str, str] | None:
    if user_metadata is None:
        return None
    if not isinstance(user_metadata, dict) or len(user_metadata) > MAX_METADATA:
        raise CheckpointError(400, f"user_metadata must be an object of at most {MAX_METADATA} string entries")
    for key, value in user_metadata.items():
        if not isinstance(value, str) or len(key) > MAX_METADATA_CHARS or len(value) > MAX_METADATA_CHARS:
            raise CheckpointError(400, f"user_metadata[{str(key)[:40]!r}] must be a string of at most "
                                       f"{MAX_METADATA_CHARS} characters")
    return dict(user_metadata)


def _write(path: Path, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta), encoding="utf-8")
    os.replace(tmp, path)  # a reader sees the old settings or the new ones


def write_meta(directory: Path, *, ttl_seconds: int | None, user_metadata: dict[str, str] | None) -> None:
    """A new save's settings (a save over an existing name starts unpublished, with its own TTL)."""
    expires = time.time() + ttl_seconds if ttl_seconds is not None else None
    _write(meta_path(directory), {"expires_at": expires, "public": False, "user_metadata": user_metadata})


def read_meta(directory: Path) -> dict[str, Any]:
    try:
        meta = json.loads(meta_path(directory).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return {"expires_at": meta.get("expires_at"), "public": bool(meta.get("public")),
            "user_metadata": meta.get("user_metadata")}


def expired(meta: dict[str, Any], now: float | None = None) -> bool:
    return meta["expires_at"] is not None and float(meta["expires_at"]) <= (time.time() if now is None else now)


def listing_fields(directory: Path) -> dict[str, Any] | None:
    """The Checkpoint fields these settings give (`public`, `user_metadata`, `expires_at`); None when expired."""
    meta = read_meta(directory)
    if expired(meta):
        return None
    expires = meta["expires_at"]
    return {"public": meta["public"], "user_metadata": meta["user_metadata"],
            "expires_at": datetime.fromtimestamp(float(expires), UTC).isoformat() if expires is not None else None}


def check_access(job: Job, directory: Path, key_id: int | None, path: str) -> None:
    """404 for an expired save, and for an unpublished one asked for with another key than its run's."""
    meta = read_meta(directory)
    owner = job.created_by_key_id
    if expired(meta) or not (meta["public"] or owner is None or owner == key_id):
        raise CheckpointError(404, f"checkpoint {path[:300]!r} not found")


def set_public(directory: Path, public: bool) -> None:
    meta = read_meta(directory)
    _write(meta_path(directory), {**meta, "public": public})


def set_ttl(directory: Path, ttl_seconds: int | None) -> None:
    meta = read_meta(directory)
    _write(meta_path(directory), {**meta, "expires_at": time.time() + ttl_seconds if ttl_seconds else None})


def delete(directory: Path) -> None:
    """The save and its settings; a concurrent reader finds it whole or gone (renamed away, then removed)."""
    doomed = directory.with_name(f"{directory.name}.deleting-{os.getpid()}-{time.monotonic_ns()}")
    with contextlib.suppress(FileNotFoundError):
        os.replace(directory, doomed)
    meta_path(directory).unlink(missing_ok=True)
    shutil.rmtree(doomed, ignore_errors=True)


def sweep_expired(artifacts: Path, now: float | None = None) -> list[Path]:
    """Delete every expired save under `<artifacts>/tinker` (the controller calls this); the directories deleted."""
    root = Path(artifacts) / "tinker"
    deleted = []
    for sidecar in root.glob(f"*/*/*/*{META_SUFFIX}") if root.is_dir() else []:
        directory = sidecar.with_name(sidecar.name.removesuffix(META_SUFFIX))
        if expired(read_meta(directory), now):
            delete(directory)
            deleted.append(directory)
            log.info("tinker checkpoint %s expired: deleted", directory)
    return deleted
