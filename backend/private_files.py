"""Tenant files on disk are private to the platform's user: directories 0700, files 0600 (docs/operator.md).

Tenants' data (the SQLite database and its WAL/SHM, uploaded datasets, checkpoints, weight-sync versions) lives
under the data and artifact dirs. Every process that writes there calls `restrict_umask()` once at start, so files
created by any library (torch.save, save_pretrained, SQLite) get 0600 and directories 0700; the helpers below also
set modes explicitly where we create files ourselves, so the result does not depend on the caller's umask.
Torch-free: the API, the controller and the workers import it.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def restrict_umask() -> int:
    """New files 0600 / directories 0700 for this process; returns the previous umask."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create `path` (and missing parents) 0700; an existing `path` itself is tightened to 0700."""
    path = Path(path)
    missing = [p for p in [path, *path.parents] if not p.exists()]
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    for created in missing:
        os.chmod(created, DIR_MODE)  # mkdir's mode is filtered by the umask; parents got the default mode
    os.chmod(path, DIR_MODE)
    return path


def write_private(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically (a `.part` file renamed into place), mode 0600, never through a symlink."""
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def private_sqlite_file(database: str | os.PathLike[str]) -> None:
    """Create the SQLite file 0600 if missing and tighten it and its WAL/SHM/journal (SQLite gives those files the
    database file's mode when it creates them)."""
    path = Path(database)
    if not path.parent.is_dir():
        return  # nothing to protect yet; whoever creates the directory creates the database
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE))
    for suffix in SQLITE_SUFFIXES:
        sibling = path.with_name(path.name + suffix)
        if sibling.exists() and not sibling.is_symlink():
            os.chmod(sibling, FILE_MODE)


def tighten_tree(root: str | os.PathLike[str]) -> int:
    """chmod an existing tree to 0700 dirs / 0600 files (upgrading a data dir written before this policy);
    symlinks are not followed. Returns how many entries changed."""
    changed = 0
    for top, dirs, files in os.walk(root):
        for name, mode in [(top, DIR_MODE)] + [(os.path.join(top, f), FILE_MODE) for f in files]:
            st = os.lstat(name)
            if not os.path.islink(name) and st.st_mode & 0o777 != mode:
                os.chmod(name, mode)
                changed += 1
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
    return changed
