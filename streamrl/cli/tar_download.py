"""Download an API tar export (a checkpoint, a model) and unpack it into a directory, or leave nothing behind.

The archive streams into `.<target>.partial` next to the target; only a complete, safely unpacked archive
(`tarfile`'s data filter: no absolute paths, `..` or links leaving the directory) replaces the target.
"""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from backend.client.client import API_PREFIX
from streamrl.cli.errors import CLIError


class ChunkReader:
    """A read-only file over an iterator of byte chunks (what `tarfile` stream mode reads from)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buffer = chunks, b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buffer += chunk
        cut = len(self._buffer) if size < 0 else size
        out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return out


def download_tar(api: Any, path: str, top: str, target: Path) -> int:
    """GET `API_PREFIX + path` (a tar whose entries are under `top/`), unpack it as `target`; its size in bytes."""
    headers = {"Authorization": f"Bearer {api.token}"} if api.token else {}
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with httpx.stream("GET", f"{api.base_url}{API_PREFIX}{path}", headers=headers, timeout=60) as response:
            if response.status_code != 200:
                raise CLIError(f"download failed ({response.status_code}): "
                               f"{response.read().decode(errors='replace')}")
            with tarfile.open(fileobj=ChunkReader(response.iter_bytes()), mode="r|") as archive:  # type: ignore[call-overload]
                archive.extractall(staging, filter="data")
        if target.exists():
            shutil.rmtree(target)
        (staging / top).rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
