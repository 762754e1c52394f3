"""A worker-local, content-addressed cache of downloaded artifact files, bounded in size.

`<root>/<sha[:2]>/<sha256>` holds a file whose content hashes to its name (verified before it is put there, so a
truncated or corrupted download never enters). Directories handed to readers are hard links into the cache (copies
across filesystems): evicting an entry never changes a directory already materialized. Eviction removes the least
recently used entries (mtime, touched on every hit) until the cache holds at most `max_bytes`; the entry just asked
for is kept even when it alone is larger.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

DEFAULT_MAX_BYTES = 20 << 30
HASH_CHUNK = 8 << 20


class CacheCorrupt(RuntimeError):
    """A downloaded file's content did not match the manifest's hash or size."""


class ContentCache:
    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root, self.max_bytes = Path(root), max_bytes
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def get(self, sha: str, size: int, download: Callable[[Path], object]) -> Path:
        """The cached file of content `sha`, downloaded with `download(tmp_path)` when absent."""
        cached = self.path(sha)
        if cached.exists():
            os.utime(cached)
            return cached
        tmp = self.root / "tmp" / uuid.uuid4().hex
        try:
            download(tmp)
            got_size, got_sha = tmp.stat().st_size, file_sha256(tmp)
            if (got_sha, got_size) != (sha, size):
                raise CacheCorrupt(f"downloaded file has sha256 {got_sha[:12]} ({got_size} bytes), the manifest says "
                                   f"{sha[:12]} ({size} bytes)")
            cached.parent.mkdir(exist_ok=True)
            os.replace(tmp, cached)
        finally:
            tmp.unlink(missing_ok=True)
        self.evict(keep=cached)
        return cached

    def adopt(self, source: Path, sha: str) -> None:
        """Enter a file this host wrote (and hashed: `sha`) as a hard link, so a reader here needs no download;
        a cache on another filesystem is left as it is (a copy would cost what it saves)."""
        cached = self.path(sha)
        if cached.exists():
            os.utime(cached)
            return
        cached.parent.mkdir(exist_ok=True)
        tmp = self.root / "tmp" / uuid.uuid4().hex
        try:
            os.link(source, tmp)
            os.replace(tmp, cached)
        except OSError:
            tmp.unlink(missing_ok=True)
            return
        self.evict(keep=cached)

    @staticmethod
    def materialize(cached: Path, target: Path) -> None:
        try:
            os.link(cached, target)
        except OSError:  # another filesystem (or no hard links): a copy
            shutil.copyfile(cached, target)

    def entries(self) -> list[Path]:
        return [p for p in self.root.glob("??/*") if p.is_file()]

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.entries())

    def evict(self, keep: Path | None = None) -> None:
        found = []
        for path in self.entries():
            try:
                stat = path.stat()
            except FileNotFoundError:  # evicted by another process meanwhile
                continue
            found.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in found)
        for _, size, path in sorted(found):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
