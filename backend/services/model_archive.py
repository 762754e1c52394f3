"""Unpack an uploaded model archive (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz or .zip) safely.

Every member is checked before anything is written: regular files and directories only (a symlink, hard link,
device or FIFO is refused), relative names without `..` or a drive, at most `MAX_MEMBERS`, and the unpacked total
within `max_bytes`. The model directory is the archive's root or its single top-level directory.
`ArchiveInvalid` (a 422) names the offending member; the caller writes into a fresh directory it removes on error,
so a refused archive leaves nothing behind.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from backend.services.errors import InvalidInput

MAX_MEMBERS = 10_000


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


def extract_archive(content: bytes, dest: Path, *, max_bytes: int) -> Path:
    """Unpack into `dest` (created, must not exist) and return the model directory inside it."""
    dest.mkdir(parents=True)
    if zipfile.is_zipfile(io.BytesIO(content)):
        with zipfile.ZipFile(io.BytesIO(content)) as archive:
            for member in _zip_members(archive, max_bytes):
                target = dest / _check_name(member.filename)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(target, "wb") as sink:
                    shutil.copyfileobj(source, sink)
    else:
        try:
            tar = tarfile.open(fileobj=io.BytesIO(content), mode="r:*")  # noqa: SIM115 - closed below
        except tarfile.TarError:
            raise ArchiveInvalid("not a tar or zip archive") from None
        with tar:
            for info in _tar_members(tar, max_bytes):
                target = dest / _check_name(info.name)
                if info.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                content_of = tar.extractfile(info)
                assert content_of is not None, "a regular file member has content"
                with content_of, open(target, "wb") as sink:
                    shutil.copyfileobj(content_of, sink)
    entries = [p for p in dest.iterdir() if p.name not in ("__MACOSX",)]
    if len(entries) == 1 and entries[0].is_dir() and not (dest / "config.json").exists():
        return entries[0]
    return dest
