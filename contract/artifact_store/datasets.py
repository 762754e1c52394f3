"""Uploaded datasets in the artifact store: the API writes `<artifact dir>/datasets/<team>/<id>.jsonl` and, with a
store, uploads it under the team's prefix before the upload is answered; a worker whose disk lacks the file reads it
from the store into its cache."""

from __future__ import annotations

from pathlib import Path

from contract.artifact_store.config import artifact_store
from contract.artifact_store.keys import dataset_key


def upload_dataset(team_id: int, dataset_id: int, path: Path, artifact_dir: Path) -> bool:
    """Upload the dataset file when STREAMRL_ARTIFACTS names a store; False when there is none."""
    store = artifact_store(artifact_dir)
    if store is None:
        return False
    store.put_dir(dataset_key(team_id, dataset_id), path.parent, names=[path.name])
    return True


def local_dataset(team_id: int, dataset_id: int, recorded: Path, artifact_dir: Path) -> Path:
    """`recorded` when this host has it, else the stored copy under `<artifact dir>/cache/datasets/` (downloaded
    once); `recorded` itself when there is no store (the reader then says the file is missing)."""
    store = artifact_store(artifact_dir)
    if recorded.exists() or store is None:
        return recorded
    local = artifact_dir / "cache" / "datasets" / str(team_id) / str(dataset_id)
    if not (local / recorded.name).exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        store.get_dir(dataset_key(team_id, dataset_id), local)
    return local / recorded.name
