"""Tenant files are private: directories 0700, files 0600 (backend/private_files.py), SQLite's WAL/SHM included."""

import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from backend.db.session import make_engine
from backend.private_files import private_dir, restrict_umask, tighten_tree, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def loose_umask():
    previous = os.umask(0o022)  # what a default shell gives: the helpers must not depend on it
    yield
    os.umask(previous)


def test_private_dir_and_write_private(tmp_path: Path, loose_umask) -> None:
    target = private_dir(tmp_path / "artifacts" / "datasets" / "7")
    assert [mode(p) for p in (tmp_path / "artifacts", tmp_path / "artifacts" / "datasets", target)] == [0o700] * 3
    path = write_private(target / "1.jsonl", b'{"prompt": "x"}\n')
    assert path.read_bytes() == b'{"prompt": "x"}\n' and mode(path) == 0o600
    assert not (target / "1.jsonl.part").exists()
    (target / "2.jsonl.part").symlink_to(tmp_path / "elsewhere")  # a planted link is not followed
    with pytest.raises(OSError):
        write_private(target / "2.jsonl", b"data")
    assert not (tmp_path / "elsewhere").exists()


def test_sqlite_database_and_wal_are_0600(tmp_path: Path, loose_umask) -> None:
    database = tmp_path / "streamrl.db"
    engine = make_engine(f"sqlite:///{database}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        wal = [database.with_name(database.name + s) for s in ("-wal", "-shm")]
        assert all(p.exists() for p in wal)  # WAL mode: both exist while a connection is open
        assert [mode(p) for p in [database, *wal]] == [0o600] * 3
    engine.dispose()


def test_restrict_umask_and_tighten_tree(tmp_path: Path, loose_umask) -> None:
    old = tmp_path / "old"
    (old / "jobs" / "1").mkdir(parents=True)
    (old / "jobs" / "1" / "model.safetensors").write_bytes(b"w")
    (old / "link").symlink_to("/etc/hostname")
    outside = mode(Path("/etc/hostname"))
    assert tighten_tree(old) == 4  # three dirs and one file; the link is left alone
    assert mode(old / "jobs" / "1" / "model.safetensors") == 0o600 and mode(old / "jobs") == 0o700
    assert mode(Path("/etc/hostname")) == outside
    previous = restrict_umask()
    try:
        (tmp_path / "new.bin").write_bytes(b"x")
        (tmp_path / "newdir").mkdir()
    finally:
        os.umask(previous)
    assert (mode(tmp_path / "new.bin"), mode(tmp_path / "newdir")) == (0o600, 0o700)
