"""Unpack an uploaded model archive (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz or .zip) safely.

Every member is checked before anything is written: regular files and directories only (a symlink, hard link,
device or FIFO is refused), relative names without `..` or a drive, at most `MAX_MEMBERS`, and the unpacked total
within `max_bytes`. The model directory is the archive's root or its single top-level directory.
`ArchiveInvalid` (a 422) names the offending member; the caller writes into a fresh directory it removes on error,
so a refused archive leaves nothing behind. Sizes are declared by the archive, so the bytes actually written are
counted too; a member that turns out corrupt or truncated (a bad CRC, a zip whose data outgrows its declared size, a
cut-off tar.gz) or whose name collides with another (a file `a` and a directory `a/`) is an `ArchiveInvalid` too.
"""

from __future__ import annotations

import io
import lzma
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from backend.services.errors import InvalidInput

MAX_MEMBERS = 10_000
CHUNK = 1 << 20
# what a corrupt or truncated member raises while it is read (zip CRC checks, zlib/gzip, lzma and bz2 streams: bz2's
# and gzip's are OSErrors without an errno, unlike a real I/O error such as a full disk), and what zipfile raises for
# a compression method it lacks (NotImplementedError) or an encrypted member (RuntimeError)
_CORRUPT = (zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError, EOFError, ValueError, OSError,
            NotImplementedError, RuntimeError)


class ArchiveInvalid(InvalidInput):
    def __init__(self, message: str):
        super().__init__(message, loc=("body", "file"))


def _check_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if name.startswith(("/", "\\")) or path.is_absolute() or (path.parts and ":" in path.parts[0]):
        raise ArchiveInvalid(f"archive member {name!r} has an absolute path")
    if ".." in path.parts:
        raise ArchiveInvalid(f"archive member {name!r} points outside the archive (`..`)")
    return path


def _tar_members(archive: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    members, total = archive.getmembers(), 0
    if len(members) > MAX_MEMBERS:
        raise ArchiveInvalid(f"archive has {len(members)} members; at most {MAX_MEMBERS}")
    for member in members:
        _check_name(member.name)
        if member.issym() or member.islnk():
            raise ArchiveInvalid(f"archive member {member.name!r} is a link; links are refused")
        if not (member.isfile() or member.isdir()):
            raise ArchiveInvalid(f"archive member {member.name!r} is not a regular file or directory")
        total += member.size
        if total > max_bytes:
            raise ArchiveInvalid(f"archive unpacks to more than {max_bytes} bytes")
    return members


def _zip_members(archive: zipfile.ZipFile, max_bytes: int) -> list[zipfile.ZipInfo]:
    members, total = archive.infolist(), 0
    if len(members) > MAX_MEMBERS:
        raise ArchiveInvalid(f"archive has {len(members)} members; at most {MAX_MEMBERS}")
    for member in members:
        _check_name(member.filename)
        mode = member.external_attr >> 16
        if mode and (mode & 0o170000) not in (0o100000, 0o040000, 0):  # only regular files and directories
            raise ArchiveInvalid(f"archive member {member.filename!r} is a link or special file; refused")
        total += member.file_size
        if total > max_bytes:
            raise ArchiveInvalid(f"archive unpacks to more than {max_bytes} bytes")
    return members


class _Written:
    """Bytes written so far, against the archive's cap (declared sizes can lie)."""

    def __init__(self, max_bytes: int) -> None:
        self.total, self.max_bytes = 0, max_bytes

    def copy(self, source: IO[bytes], target: Path, name: str) -> None:
        with open(target, "xb") as sink:  # `x`: a second member of the same name is a collision, not an overwrite
            while chunk := source.read(CHUNK):
                self.total += len(chunk)
                if self.total > self.max_bytes:
                    raise ArchiveInvalid(f"archive unpacks to more than {self.max_bytes} bytes (at member {name!r})")
                sink.write(chunk)


def _place(dest: Path, name: str, is_dir: bool) -> Path:
    """The member's path under `dest`, its parent directories made; ArchiveInvalid when a name collides."""
    target = dest / _check_name(name)
    try:
        if is_dir:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                raise FileExistsError(target)
    except (FileExistsError, NotADirectoryError, IsADirectoryError):
        raise ArchiveInvalid(f"archive member {name!r} collides with another member of the same name (a file and "
                             "a directory, or a duplicate)") from None
    return target


def _unpack(content: bytes, dest: Path, max_bytes: int) -> None:
    written = _Written(max_bytes)
    if zipfile.is_zipfile(io.BytesIO(content)):
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            for member in _zip_members(archive, max_bytes):
                target = _place(dest, member.filename, member.is_dir())
                if not member.is_dir():
                    with archive.open(member) as source:
                        written.copy(source, target, member.filename)
        return
    try:
        tar = tarfile.open(fileobj=io.BytesIO(content), mode="r:*")  # noqa: SIM115 - closed below
    except tarfile.TarError:
        raise ArchiveInvalid("not a tar or zip archive") from None
    with tar:
        for info in _tar_members(tar, max_bytes):
            target = _place(dest, info.name, info.isdir())
            if not info.isdir():
                content_of = tar.extractfile(info)
                assert content_of is not None, "a regular file member has content"
                with content_of:
                    written.copy(content_of, target, info.name)


def extract_archive(content: bytes, dest: Path, *, max_bytes: int) -> Path:
    """Unpack into `dest` (created, must not exist) and return the model directory inside it."""
    dest.mkdir(parents=True)
    try:
        _unpack(content, dest, max_bytes)
    except ArchiveInvalid:
        raise
    except _CORRUPT as exc:  # after the members' checks: the data itself is corrupt or cut off
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # the server's disk, not the upload
        why = f"{exc.__class__.__name__}: {str(exc)[:200]}"
        raise ArchiveInvalid(f"the archive is corrupt, truncated or uses what this server cannot unpack ({why})") \
            from None
    entries = [p for p in dest.iterdir() if p.name not in ("__MACOSX",)]
    if len(entries) == 1 and entries[0].is_dir() and not (dest / "config.json").exists():
        return entries[0]
    return dest
