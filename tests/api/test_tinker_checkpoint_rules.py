"""Tinker checkpoint settings (backend/services/tinker_checkpoints.py): TTL, visibility, delete, and the controller's
watch loop deleting expired saves. The same through the SDK on a live session: tests/integration/test_tinker_sdk.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis

from backend.controller.watch import WatchLoop
from backend.db.models import Job
from backend.db.session import make_engine
from backend.services import tinker_checkpoints as checkpoints
from contract.settings import Settings


def _save(artifacts: Path, name: str, **meta: object) -> Path:
    directory = artifacts / "tinker" / "1" / "7" / "weights" / name
    directory.mkdir(parents=True)
    (directory / "adapter_model.safetensors").write_bytes(b"0" * 8)
    checkpoints.write_meta(directory, ttl_seconds=meta.get("ttl"), user_metadata=meta.get("user_metadata"))  # type: ignore[arg-type]
    return directory


def test_expiry_visibility_and_delete(tmp_path: Path) -> None:
    keep = _save(tmp_path, "keep", user_metadata={"note": "x"})
    short = _save(tmp_path, "short", ttl=60)
    job = Job(created_by_key_id=5)
    assert checkpoints.listing_fields(keep) == {"public": False, "user_metadata": {"note": "x"}, "expires_at": None}
    assert checkpoints.listing_fields(short)["expires_at"] is not None  # type: ignore[index]
    checkpoints.check_access(job, keep, 5, "p")  # the run's own key
    with pytest.raises(checkpoints.CheckpointError) as other_key:
        checkpoints.check_access(job, keep, 6, "p")
    assert other_key.value.status_code == 404
    checkpoints.set_public(keep, True)
    checkpoints.check_access(job, keep, 6, "p")  # published: the team's other keys
    assert checkpoints.read_meta(keep)["user_metadata"] == {"note": "x"}  # publishing keeps the rest
    assert checkpoints.sweep_expired(tmp_path) == []
    assert checkpoints.sweep_expired(tmp_path, now=time.time() + 61) == [short]  # its TTL ran out
    assert not short.exists() and not checkpoints.meta_path(short).exists() and keep.is_dir()
    checkpoints.set_ttl(keep, 1)
    assert checkpoints.listing_fields(keep) is not None
    checkpoints.delete(keep)
    assert not keep.exists() and not checkpoints.meta_path(keep).exists()
    for bad in (0, -1, 1.5, "60", True, checkpoints.MAX_TTL_S + 1):
        with pytest.raises(checkpoints.CheckpointError, match="ttl_seconds must be"):
            checkpoints.check_ttl(bad)
    with pytest.raises(checkpoints.CheckpointError, match=r"user_metadata\['n'\]"):
        checkpoints.check_metadata({"n": 3})


def test_the_controllers_watch_loop_deletes_expired_saves(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    artifacts = tmp_path / "artifacts"
    expired = _save(artifacts, "gone", ttl=1)
    kept = _save(artifacts, "kept", ttl=3600)
    meta = checkpoints.meta_path(expired)  # its TTL ran out a second ago (the sidecar's own format)
    meta.write_text(json.dumps({**checkpoints.read_meta(expired), "expires_at": time.time() - 1}))
    settings = Settings(database_url=pg_url, redis_url=redis_url, data_dir=tmp_path)
    assert Path(settings.artifacts) == artifacts
    engine = make_engine(pg_url)
    watch = WatchLoop(settings, redis.Redis.from_url(redis_url), engine)
    try:
        watch.step()
    finally:
        engine.dispose()
    assert not expired.exists() and kept.is_dir()
