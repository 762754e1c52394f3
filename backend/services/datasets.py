"""Prompt datasets: JSONL uploads validated line by line, stored under `<artifact_dir>/datasets/<team>/<id>.jsonl`.

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
from backend.services.errors import InvalidInput, PayloadTooLarge, not_found
from backend.services.strict_json import BadJson, check_text, strict_json_loads

CHUNK_BYTES = 1 << 20


def read_limited(stream: BinaryIO, *, max_bytes: int) -> bytes:
    """The whole stream, or `PayloadTooLarge` as soon as it passes `max_bytes`."""
    parts, total = [], 0
    while chunk := stream.read(CHUNK_BYTES):
        total += len(chunk)
        if total > max_bytes:
            raise PayloadTooLarge(f"upload exceeds the limit of {max_bytes} bytes")
        parts.append(chunk)
    return b"".join(parts)


def _line_error(number: int, reason: str) -> InvalidInput:
    return InvalidInput(f"line {number}: {reason}", loc=("body", "file", f"line {number}"))


def validate_jsonl(content: bytes) -> int:
    """Row count of a JSONL prompt file; `InvalidInput` naming the first bad line (1-based). Blank lines are skipped.

    Lines are split on `\n` only, exactly as `read_rows` reads them back (a `\x0c` or U+2028 between two objects
    is one bad line, not two rows), and each line must be strict JSON (see backend.services.strict_json).
    """
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _line_error(content.count(b"\n", 0, exc.start) + 1, "not valid UTF-8") from None
    rows = 0
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if "\r" in line[:-1]:  # readers with universal newlines would split the line there
            raise _line_error(number, "a carriage return inside a line (lines end with \\n or \\r\\n)")
        try:
            row = strict_json_loads(line)
        except BadJson as exc:
            where = "".join(f"[{part!r}]" for part in exc.loc)
            raise _line_error(number, f"{where} {exc}" if where else str(exc)) from None
        if not isinstance(row, dict):
            raise _line_error(number, "each line must be a JSON object")
        prompt = row.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise _line_error(number, "`prompt` must be a non-empty string")
        rows += 1
    if rows == 0:
        raise InvalidInput("the dataset has no rows", loc=("body", "file"))
    return rows


def create_dataset(
    *, session: Session, team: Team, user: User, name: str, content: bytes, artifact_dir: Path
) -> Dataset:
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidInput("name must be 1-200 characters", loc=("body", "name"))
    try:
        check_text(name)
    except BadJson as exc:
        raise InvalidInput(f"name {exc}", loc=("body", "name")) from None
    row_count = validate_jsonl(content)
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
    dataset.storage_path = str(path)
    session.flush()
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
    with open(dataset.storage_path, encoding="utf-8", newline="\n") as handle:  # split as validate_jsonl does
        rows = (json.loads(line) for line in handle if line.strip())
        return list(itertools.islice(rows, offset, offset + limit))
