"""Import one split of a Hub dataset (id + revision + split) in a background thread of the API process, the way Hub
models are downloaded (backend/services/model_hub.py: endpoint, team token, offline reasons).

    start_import(session_factory, dataset_id, settings)   # the dataset row is `downloading`; returns at once

A dry run of `snapshot_download(repo_type="dataset")` lists the repo's data files (`DATA_SUFFIXES`); the split's
files are chosen by `split_files` and only they are downloaded, into `<id>.hub/` next to where the JSONL will be.
Accepted layouts (paths in the repo; `<ext>` one of jsonl, json (JSON lines), parquet, csv):

    <split>.<ext>            data/<split>.<ext>             one file
    <split>-*.<ext>          data/<split>-*.<ext>           shards (the Hub's `data/train-00000-of-00001.parquet`)
    <split>/*.<ext>          data/<split>/*.<ext>           a directory per split

Each file goes through the upload validation (backend/services/dataset_formats.py); the first bad row fails the
dataset with the file, row and column named. Invariant: the JSONL is written only when every row passed, then the row
becomes `ready`; otherwise it is `failed` with the reason and no file is kept. The download folder is removed
either way (a stopped API leaves it, and `resume_imports` resumes from it).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
from pathlib import Path, PurePosixPath

from sqlalchemy import select

from backend.db.models import Dataset
from backend.private_files import private_dir, write_private
from backend.services.dataset_formats import parse_upload
from backend.services.egress import Policy, policy_of
from backend.services.errors import InvalidInput
from backend.services.model_hub import SessionFactory, endpoint_refusal, reason_of, team_hub_token
from contract.settings import Settings

log = logging.getLogger(__name__)
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
OFFLINE_INSTEAD = "Upload the dataset file instead (POST /datasets)"


class ImportFailed(Exception):
    """A reason the user reads on the failed dataset."""


def split_of(path: str) -> str | None:
    """The split a data file seems to belong to (for naming the splits found), else None."""
    parts = list(PurePosixPath(path).parts)
    if not path.endswith(DATA_SUFFIXES) or not parts:
        return None
    if parts[0] == "data" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) == 2:
        return parts[0]  # <split>/<file>
    if len(parts) != 1:
        return None
    stem = PurePosixPath(parts[0]).stem
    return stem.split("-", 1)[0] if "-" in stem else stem


def in_split(path: str, split: str) -> bool:
    parts = list(PurePosixPath(path).parts)
    if not path.endswith(DATA_SUFFIXES) or not parts:
        return False
    if parts[0] == "data" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) == 2:
        return parts[0] == split
    stem = PurePosixPath(parts[0]).stem
    return len(parts) == 1 and (stem == split or stem.startswith(split + "-"))


def split_files(files: list[str], split: str, hub_id: str) -> list[str]:
    chosen = sorted(f for f in files if in_split(f, split))
    if not chosen:
        found = sorted({s for f in files if (s := split_of(f)) is not None})
        listed = ", ".join(found) if found else "none (no jsonl, json, parquet or csv files in an accepted layout)"
        raise ImportFailed(f"no files for split {split!r} in {hub_id}; splits found: {listed}")
    return chosen


def _update(session_factory: SessionFactory, dataset_id: int, **values: object) -> None:
    with session_factory() as session:
        dataset = session.get(Dataset, dataset_id)
        if dataset is not None:
            for key, value in values.items():
                setattr(dataset, key, value)
            session.commit()


def _convert(folder: Path, chosen: list[str], max_bytes: int) -> tuple[bytes, int]:
    """The split's rows as one validated JSONL and its row count."""
    total = sum((folder / name).stat().st_size for name in chosen)
    if total > max_bytes:
        raise ImportFailed(f"split files are {total} bytes, over the limit of {max_bytes} bytes")
    parts, rows = [], 0
    for name in chosen:
        try:
            stored, count = parse_upload((folder / name).read_bytes(), name)
        except InvalidInput as exc:
            raise ImportFailed(f"{name}: {exc.detail}") from None
        parts.append(stored if stored.endswith(b"\n") else stored + b"\n")
        rows += count
    return b"".join(parts), rows


def import_dataset(session_factory: SessionFactory, dataset_id: int, *, artifact_dir: Path, endpoint: str | None,
                   token: str | None, max_bytes: int, policy: Policy) -> None:
    """The background task: list, download the split's files, validate, record `ready` or `failed` + reason.

    It writes only inside this server's `<artifact_dir>/datasets/<team>/`: a row whose path is elsewhere (another
    deployment's artifact dir on a shared database) is left alone."""
    from huggingface_hub import snapshot_download

    with session_factory() as session:
        dataset = session.get(Dataset, dataset_id)
        if dataset is None or dataset.state != "downloading":
            return
        hub_id, revision, split = str(dataset.hub_id), dataset.revision or "main", str(dataset.split)
        target, team_dir = Path(dataset.storage_path), artifact_dir / "datasets" / str(dataset.team_id)
    if target.parent.resolve() != team_dir.resolve() or target.suffix != ".jsonl":
        log.warning("dataset %s: %s is not under %s; not imported by this server", dataset_id, target, team_dir)
        return
    refused = endpoint_refusal(endpoint, policy)
    if refused is not None:
        _update(session_factory, dataset_id, state="failed", error=refused)
        return
    folder = target.with_suffix(".hub")
    private_dir(target.parent)
    private_dir(folder)
    try:
        plan = snapshot_download(hub_id, repo_type="dataset", revision=revision, local_dir=folder, token=token,
                                 endpoint=endpoint, allow_patterns=[f"*{s}" for s in DATA_SUFFIXES], dry_run=True)
        chosen = split_files([str(f.filename) for f in plan] if isinstance(plan, list) else [], split, hub_id)
        snapshot_download(hub_id, repo_type="dataset", revision=revision, local_dir=folder, token=token,
                          endpoint=endpoint, allow_patterns=chosen)
        content, rows = _convert(folder, chosen, max_bytes)
        write_private(target, content)
        _update(session_factory, dataset_id, state="ready", error=None, row_count=rows, size_bytes=len(content),
                checksum=hashlib.sha256(content).hexdigest())
    except Exception as exc:  # recorded on the row: the user sees why, the API goes on
        target.unlink(missing_ok=True)
        reason = str(exc) if isinstance(exc, ImportFailed) else reason_of(exc, endpoint, what="dataset",
                                                                          instead=OFFLINE_INSTEAD)
        log.warning("dataset %s: import of %s@%s[%s] failed: %r", dataset_id, hub_id, revision, split, exc)
        _update(session_factory, dataset_id, state="failed", error=reason)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start_import(session_factory: SessionFactory, dataset_id: int, settings: Settings) -> threading.Thread:
    with session_factory() as session:
        dataset = session.get(Dataset, dataset_id)
        team_id = dataset.team_id if dataset is not None else None
    thread = threading.Thread(target=import_dataset, args=(session_factory, dataset_id),
                              kwargs={"artifact_dir": settings.artifacts, "endpoint": settings.hub_endpoint,
                                      "token": team_hub_token(session_factory, team_id, settings),
                                      "max_bytes": 4 * settings.max_upload_bytes, "policy": policy_of(settings)},
                              name=f"dataset-{dataset_id}-import", daemon=True)
    thread.start()
    return thread


def resume_imports(session_factory: SessionFactory, settings: Settings) -> list[threading.Thread]:
    """Restart the imports a stopped API left `downloading`."""
    with session_factory() as session:
        ids = list(session.scalars(select(Dataset.id).where(Dataset.state == "downloading")))
    return [start_import(session_factory, dataset_id, settings) for dataset_id in ids]
