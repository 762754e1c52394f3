"""Prompt datasets: JSONL, Parquet or CSV uploads validated row by row (backend/services/dataset_formats.py), stored as
JSONL under `<artifact_dir>/datasets/<team>/<id>.jsonl`.

Invariant: a dataset row exists only for a file that passed validation; a refused upload writes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Any, BinaryIO

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.models import Dataset, Team, User
from backend.private_files import private_dir, write_private
from backend.services.dataset_formats import parse_upload
from backend.services.errors import Conflict, InvalidInput, PayloadTooLarge, StoreUnavailable, not_found
from backend.services.models import HUB_ID_PATTERN, REVISION_PATTERN
from backend.services.strict_json import BadJson, check_text
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.datasets import upload_dataset

CHUNK_BYTES = 1 << 20


MULTIPART_OVERHEAD = 64 * 1024  # what multipart framing may add to a file in a request's declared Content-Length


def read_upload(stream: BinaryIO, *, declared_bytes: int, max_bytes: int) -> bytes:
    """An uploaded file's bytes: `PayloadTooLarge` at once when the request declares more than the limit allows,
    else read up to the limit (`read_limited`)."""
    if declared_bytes > max_bytes + MULTIPART_OVERHEAD:
        raise PayloadTooLarge(f"upload exceeds the limit of {max_bytes} bytes")
    return read_limited(stream, max_bytes=max_bytes)


def read_limited(stream: BinaryIO, *, max_bytes: int) -> bytes:
    """The whole stream, or `PayloadTooLarge` as soon as it passes `max_bytes`."""
    parts, total = [], 0
    while chunk := stream.read(CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise PayloadTooLarge(f"upload exceeds the limit of {max_bytes} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidInput("name must be 1-200 characters", loc=("body", "name"))
    try:
        check_text(name)
    except BadJson as exc:
        raise InvalidInput(f"name {exc}", loc=("body", "name")) from None
    return name


def _refuse_taken(session: Session, team: Team, name: str) -> None:
    """Dataset names are unique per team (a job's spec and the dashboard name a dataset; two alike would be a guess)."""
    if session.scalar(select(Dataset.id).where(Dataset.team_id == team.id, Dataset.name == name)) is not None:
        raise Conflict(f"a dataset named {name!r} already exists in this team: choose another name")


def register_hub_dataset(*, session: Session, team: Team, user: User, name: str, hub_id: str, revision: str,
                         split: str, artifact_dir: Path) -> Dataset:
    """A `downloading` dataset; the caller starts the import (backend/services/dataset_hub.py) after committing."""
    name = _check_name(name)
    _refuse_taken(session, team, name)
    if not HUB_ID_PATTERN.match(hub_id):
        raise InvalidInput(f"hub_id {hub_id!r} is not a Hub dataset id (owner/name)", loc=("body", "hub_id"))
    if not REVISION_PATTERN.match(revision) or ".." in revision:
        raise InvalidInput(f"revision {revision!r} is not a branch, tag or commit", loc=("body", "revision"))
    dataset = Dataset(team_id=team.id, name=name, row_count=0, checksum="", size_bytes=0, storage_path="",
                      state="downloading", source="hub", hub_id=hub_id, revision=revision, split=split,
                      created_by_id=user.id)
    session.add(dataset)
    session.flush()
    dataset.storage_path = str(artifact_dir / "datasets" / str(team.id) / f"{dataset.id}.jsonl")
    session.flush()
    return dataset


def require_ready(dataset: Dataset, loc: tuple[str, ...]) -> None:
    """Rows, previews and jobs need the file: a downloading or failed dataset is refused naming its state."""
    if dataset.state != "ready":
        why = f": {dataset.error}" if dataset.state == "failed" and dataset.error else " (wait until it is ready)"
        raise InvalidInput(f"dataset {dataset.id} is {dataset.state}, not ready{why}", loc=loc)


def create_dataset(
    *, session: Session, team: Team, user: User, name: str, content: bytes, artifact_dir: Path,
    filename: str | None = None,
) -> Dataset:
    name = _check_name(name)
    _refuse_taken(session, team, name)
    content, row_count = parse_upload(content, filename)
    dataset = Dataset(
        team_id=team.id,
        name=name,
        row_count=row_count,
        checksum=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
        storage_path="",
        created_by_id=user.id,
    )
    session.add(dataset)
    session.flush()  # assigns the id the file is named by
    path = artifact_dir / "datasets" / str(team.id) / f"{dataset.id}.jsonl"
    private_dir(path.parent)  # 0700; the file 0600 (backend/private_files.py)
    write_private(path, content)
    try:  # hosts without the shared volume read it from the store (contract/artifact_store/datasets.py)
        upload_dataset(team.id, dataset.id, path, artifact_dir)
    except ArtifactStoreError as err:
        path.unlink(missing_ok=True)
        raise StoreUnavailable(f"the dataset could not be stored: {err}") from err
    dataset.storage_path = str(path)
    session.flush()
    return dataset


def store_dataset(*, session: Session, team: Team, user: User, name: str, content: bytes, artifact_dir: Path,
                  filename: str | None = None) -> Dataset:
    """`create_dataset`, committed; when the row cannot be committed its file is removed (no file without its row)."""
    dataset = create_dataset(session=session, team=team, user=user, name=name, content=content,
                             artifact_dir=artifact_dir, filename=filename)
    try:
        session.commit()
    except BaseException:
        Path(dataset.storage_path).unlink(missing_ok=True)
        raise
    return dataset


def list_datasets(*, session: Session, team: Team, limit: int, offset: int) -> tuple[list[Dataset], int]:
    query = select(Dataset).where(Dataset.team_id == team.id)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    return list(session.scalars(query.order_by(Dataset.id.desc()).limit(limit).offset(offset))), total


def get_dataset(*, session: Session, team: Team, dataset_id: int) -> Dataset:
    dataset = session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.team_id == team.id))
    if dataset is None:
        raise not_found("dataset", dataset_id)
    return dataset


def read_rows(dataset: Dataset, *, limit: int, offset: int) -> list[dict[str, Any]]:
    with open(dataset.storage_path, encoding="utf-8", newline="\n") as handle:  # split as parse_upload does
        rows = (json.loads(line) for line in handle if line.strip())
        return list(itertools.islice(rows, offset, offset + limit))
