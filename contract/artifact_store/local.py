"""The directory backend: a store rooted at a directory (a mounted volume), same contract as object storage.

Objects are files under `root`; an upload is written to a temporary name and renamed, so an object is whole or
absent, and the manifest (written last) makes a version visible. Without STREAMRL_ARTIFACTS the platform does not use
a store at all (every process reads the shared artifact dir in place); this backend serves STREAMRL_ARTIFACTS=file://
and is the baseline of bench/artifacts.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from contract.artifact_store.base import ArtifactStore, ArtifactStoreDenied, ArtifactStoreFull
from contract.artifact_store.cache import ContentCache


class LocalDirStore(ArtifactStore):
    def __init__(self, root: Path, cache: ContentCache, retry_s: float = 60.0) -> None:
        super().__init__(cache, retry_s)
        self.root = Path(root)
        self.url = f"file://{self.root}"
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError(f"key {key!r} leaves the store")
        return path

    def _write(self, key: str, write: object) -> None:
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}")
        try:
            if isinstance(write, bytes):
                tmp.write_bytes(write)
            else:
                assert isinstance(write, Path)
                shutil.copyfile(write, tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)

    def _upload_file(self, source: Path, key: str) -> None:
        self._write(key, source)

    def _put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, data)

    def _get_bytes(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _download_file(self, key: str, dest: Path) -> None:
        shutil.copyfile(self._path(key), dest)

    def _list_keys(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if not base.is_dir():
            return
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith("."):
                yield path.relative_to(self.root).as_posix()

    def _delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def share_url(self, key: str, expires_s: int = 3600) -> str | None:
        return None  # files are streamed by the API

    def _classify(self, err: Exception) -> Exception:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return ArtifactStoreFull(f"artifact store {self.url} is full: {err.strerror}")
        if isinstance(err, PermissionError):
            return ArtifactStoreDenied(f"artifact store {self.url} denied access: {err}")
        return err
