"""Uploaded models in the artifact store: the API unpacks an uploaded archive into
`<artifact dir>/team-models/<team>/<id>` and, with a store, uploads the directory under the team's prefix before the
upload is answered; a worker whose disk lacks that directory reads it from the store into its cache
(`<artifact dir>/cache/models/<team>/<id>`, downloaded once; the content cache shares files between versions)."""

from __future__ import annotations

from pathlib import Path

from contract.artifact_store.config import artifact_store
from contract.artifact_store.keys import model_key

TEAM_MODELS_DIR = "team-models"  # backend/services/models.py keeps uploaded models there


def upload_model(team_id: int, model_id: int, directory: Path, artifact_dir: Path) -> bool:
    """Upload the model directory when STREAMRL_ARTIFACTS names a store; False when there is none."""
    store = artifact_store(artifact_dir)
    if store is None:
        return False
    store.put_dir(model_key(team_id, model_id), directory)
    return True


def stored_model_id(team_id: int, recorded: Path) -> int | None:
    """The model id of an uploaded model's recorded directory (`.../team-models/<team>/<id>`), None for any other
    path (a registered server directory, a Hub download: those stay where they are)."""
    parts = recorded.parts
    if len(parts) >= 3 and parts[-3] == TEAM_MODELS_DIR and parts[-2] == str(team_id) and parts[-1].isdigit():
        return int(parts[-1])
    return None


def local_model(team_id: int, recorded: Path, artifact_dir: Path) -> Path:
    """`recorded` when this host has it (or there is no store, or it is not an uploaded model), else the stored copy
    under `<artifact dir>/cache/models/`."""
    model_id = stored_model_id(team_id, recorded)
    if recorded.exists() or model_id is None:
        return recorded
    store = artifact_store(artifact_dir)
    if store is None:
        return recorded
    local = artifact_dir / "cache" / "models" / str(team_id) / str(model_id)
    if not local.is_dir():
        if store.manifest(model_key(team_id, model_id)) is None:
            return recorded  # not uploaded through a store (a Hub download): the reader says it is missing
        local.parent.mkdir(parents=True, exist_ok=True)
        store.get_dir(model_key(team_id, model_id), local)
    return local
