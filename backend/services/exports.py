"""Exports of what a job recorded: metrics as CSV/JSON rows, events as JSONL, a checkpoint directory as a tar stream.

A checkpoint exports in one of three forms (`CheckpointForm`): the whole directory (resumable state included), the
model alone (the HF directory: config, safetensors, tokenizer; a LoRA job's checkpoint holds its merged model
there, written by the trainer at checkpoint time, so the control plane never merges or imports torch), or a LoRA
job's adapter alone (PEFT layout, the checkpoint's `adapter/` directory).

The tar is written member by member in fixed-size chunks (headers from `tarfile.TarInfo`), so a multi-GB checkpoint
is streamed without being held in memory or written to a temporary file.
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from backend.db.models import Iteration, JobEvent

CheckpointForm = Literal["checkpoint", "merged", "adapter"]
ADAPTER_DIR = "adapter"  # workers/models/lora.py ADAPTER_DIR
TRAINER_FILES = ("trainer_state.pt", "value_head.safetensors")  # resumable state: not part of the model
CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE
FIXED_COLUMNS = ("iteration", "created_at")


def metric_columns(rows: Sequence[Iteration]) -> list[str]:
    """iteration, created_at, then every metric key any row has, sorted."""
    keys = sorted({key for row in rows for key in row.metrics})
    return [*FIXED_COLUMNS, *keys]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def metrics_csv(rows: Sequence[Iteration]) -> str:
    """One line per iteration; a metric an iteration did not record is an empty cell."""
    columns = metric_columns(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        record = {"iteration": row.iteration, "created_at": row.created_at.isoformat(), **row.metrics}
        writer.writerow([_cell(record.get(column)) for column in columns])
    return out.getvalue()


def events_jsonl(events: Sequence[JobEvent]) -> str:
    lines = (
        json.dumps({"id": e.id, "kind": e.kind, "message": e.message, "data": e.data,
                    "created_at": e.created_at.isoformat()})
        for e in events
    )
    return "".join(f"{line}\n" for line in lines)


def _members(root: Path) -> Iterator[Path]:
    """Directories and regular files under `root` in a stable order; symlinks are skipped (never followed)."""
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            continue
        if path.is_dir() or path.is_file():
            yield path


def directory_members(root: Path, skip: tuple[str, ...] = (".cache",)) -> list[Path]:
    """`_members(root)` but those under a directory named in `skip` (a Hub download's `.cache/huggingface`)."""
    return [p for p in _members(root) if not set(p.relative_to(root).parts) & set(skip)]


def model_members(root: Path) -> list[Path]:
    """The HF model of a checkpoint directory: its top-level files but the trainer's resumable state."""
    return [p for p in sorted(root.iterdir()) if p.is_file() and not p.is_symlink() and p.name not in TRAINER_FILES]


def export_root(directory: Path, form: CheckpointForm) -> tuple[Path, list[Path] | None] | None:
    """What to archive for `form`: the root and its members (None: every member); None when the checkpoint has no
    such form (an adapter of a job that trained every weight)."""
    if form == "adapter":
        adapter = directory / ADAPTER_DIR
        return (adapter, None) if adapter.is_dir() and not adapter.is_symlink() else None
    if form == "merged":
        return directory, model_members(directory)
    return directory, None


def tar_stream(root: Path, arcname: str, members: list[Path] | None = None) -> Iterator[bytes]:
    """An uncompressed tar of directory `root` (members under `arcname/`; `members`: only those, else everything),
    yielded in chunks of at most 1 MiB."""
    top = tarfile.TarInfo(arcname)
    top.type, top.mode, top.mtime = tarfile.DIRTYPE, 0o755, int(root.stat().st_mtime)
    yield top.tobuf(format=tarfile.PAX_FORMAT)
    for path in _members(root) if members is None else members:
        stat = path.stat()
        info = tarfile.TarInfo(f"{arcname}/{path.relative_to(root).as_posix()}")
        info.mtime, info.mode = int(stat.st_mtime), 0o755 if path.is_dir() else 0o644
        if path.is_dir():
            info.type = tarfile.DIRTYPE
            yield info.tobuf(format=tarfile.PAX_FORMAT)
            continue
        info.size = stat.st_size
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        with path.open("rb") as handle:
            while sent < info.size and (chunk := handle.read(min(CHUNK, info.size - sent))):
                sent += len(chunk)
                yield chunk
        if sent != info.size:
            raise OSError(f"{path} changed size while being archived ({info.size} -> {sent} bytes)")
        if info.size % BLOCK:
            yield b"\0" * (BLOCK - info.size % BLOCK)
    yield b"\0" * (2 * BLOCK)  # end-of-archive marker


def checkpoint_dir(path: str, artifact_dir: Path) -> Path | None:
    """The checkpoint's directory when it exists under `artifact_dir` (never serve a path outside it)."""
    directory = Path(path).expanduser().resolve()
    root = artifact_dir.expanduser().resolve()
    if not directory.is_dir() or not directory.is_relative_to(root):
        return None
    return directory
