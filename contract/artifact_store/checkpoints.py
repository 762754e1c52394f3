"""A job's checkpoints in the artifact store, mirrored from the training host's local checkpoints directory.

The driver saves locally (workers/training/checkpoint.py), then `upload`s: the checkpoint counts as written only
once its manifest is in the store. On resume, `restore` brings the checkpoint the driver will pick (the newest at or
below the last recorded iteration, else the newest) into the local directory when this host lacks it: another
host wrote it, or this host's disk was wiped.
"""

from __future__ import annotations

import logging
from pathlib import Path

from contract.artifact_store.base import ArtifactStore
from contract.artifact_store.keys import checkpoint_key, checkpoints_prefix

log = logging.getLogger(__name__)
PREFIX = "iter_"


def _iteration(name: str) -> int:
    return int(name.removeprefix(PREFIX))


class CheckpointMirror:
    def __init__(self, store: ArtifactStore, team_id: int, job_id: int) -> None:
        self.store, self.team_id, self.job_id = store, team_id, job_id

    def key(self, name: str) -> str:
        return checkpoint_key(self.team_id, self.job_id, name)

    def upload(self, path: Path) -> None:
        """The files also enter this host's content cache (hard links: a checkpoint's files are never rewritten in
        place), so this host restores or exports the checkpoint from local files once its manifest is in the store;
        another host downloads it."""
        self.store.put_dir(self.key(path.name), path, cache_files=True)

    def names(self) -> list[str]:
        return [n for n in self.store.versions(checkpoints_prefix(self.team_id, self.job_id))
                if n.startswith(PREFIX) and n.removeprefix(PREFIX).isdigit()]

    def retain(self, kept: set[str]) -> None:
        """Delete the stored checkpoints the local retention removed."""
        for name in self.names():
            if name not in kept:
                self.store.delete(self.key(name))

    def restore(self, root: Path, at_most: int | None = None) -> Path | None:
        """Download the checkpoint a resume uses into `root` unless it is there; returns its local path."""
        names = self.names()
        eligible = [n for n in names if at_most is None or _iteration(n) <= at_most] or names
        if not eligible:
            return None
        name = eligible[-1]
        local = root / name
        if not local.is_dir():
            root.mkdir(parents=True, exist_ok=True)
            self.store.get_dir(self.key(name), local)
            log.info("job %s: checkpoint %s restored from %s", self.job_id, name, self.store.url)
        return local


def checkpoint_mirror(team_id: int, job_id: int, job_dir: Path) -> CheckpointMirror | None:
    """The job's mirror when STREAMRL_ARTIFACTS names a store (`job_dir`: `<artifact dir>/jobs/<id>`, whose
    artifact dir holds this host's cache), else None."""
    from contract.artifact_store.config import artifact_store

    store = artifact_store(job_dir.parent.parent)
    return None if store is None else CheckpointMirror(store, team_id, job_id)


def stored_iterations(team_id: int, job_id: int, artifact_dir: Path) -> set[int] | None:
    """The iterations whose checkpoint is complete in the store (its manifest is there): what a host with no shared
    disk lists (GET /jobs/{id}/checkpoints); None without a store."""
    from contract.artifact_store.config import artifact_store

    store = artifact_store(artifact_dir)
    if store is None:
        return None
    return {_iteration(name) for name in CheckpointMirror(store, team_id, job_id).names()}


def stored_checkpoint(team_id: int, job_id: int, iteration: int, artifact_dir: Path) -> Path | None:
    """A checkpoint this host lacks, from the store into `<artifact dir>/cache/checkpoints/` (the API exports and
    forks from it); None without a store or when the store has no complete checkpoint of that iteration."""
    from contract.artifact_store.config import artifact_store

    store = artifact_store(artifact_dir)
    if store is None:
        return None
    name = f"{PREFIX}{iteration:06d}"
    local = artifact_dir / "cache" / "checkpoints" / str(team_id) / str(job_id) / name
    if local.is_dir():
        return local
    key = checkpoint_key(team_id, job_id, name)
    if store.manifest(key) is None:
        return None
    local.parent.mkdir(parents=True, exist_ok=True)
    return store.get_dir(key, local)
