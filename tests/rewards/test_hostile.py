"""The hostile-reward suite: every program in hostile_cases.py is contained by the reward jail, with the worker
parent running as root and as an unprivileged worker user.

Targets are concrete and world-readable/-writable on the host, so only the jail stands between them and the code:
canary bytes in a data dir, a SQLite database, another team's dataset and the parent's environment; a TCP and a
Unix-socket listener (plus the real Redis/Postgres); victim processes owned by root, by uid 65534 and by the worker
user; a file that must not appear and a stdlib file that must not change.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_cases import CASES, IMPORT_TIME, Case, run_all

from workers.rewards.jail import JAIL_UID, missing_piece, python_runtime

WORKER_UID = 61234  # the unprivileged worker user of the second run (any uid without a login)
ROOT = Path(__file__).resolve().parents[2]
ALL_CASES = [*CASES, IMPORT_TIME]

pytestmark = pytest.mark.skipif(missing_piece() is not None, reason=f"reward jail unavailable: {missing_piece()}")


class Targets:
    def __init__(self) -> None:
        self.canary = "CANARY-" + secrets.token_hex(12)
        self.dir = Path(tempfile.mkdtemp(prefix="streamrl-hostile-"))
        self.dir.chmod(0o755)
        data = self.dir / "data"
        (data / "datasets" / "2").mkdir(parents=True)
        (data / "secret.txt").write_text(f"{self.canary}\n")
        dataset = data / "datasets" / "2" / "7.jsonl"
        dataset.write_text(json.dumps({"prompt": self.canary, "answer": "4"}) + "\n")
        database = data / "streamrl.db"
        with sqlite3.connect(database) as db:
            db.execute("CREATE TABLE users (token TEXT)")
            db.execute("INSERT INTO users VALUES (?)", (self.canary,))
        open_dir = self.dir / "open"
        open_dir.mkdir()
        open_dir.chmod(0o777)
        for path in (self.dir, data, data / "datasets", data / "datasets" / "2"):
            path.chmod(0o755)
        for path in (data / "secret.txt", dataset, database):
            path.chmod(0o644)
        self.write_target = open_dir / "evil.py"
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        self.stdlib_file = Path(python_runtime()[0]) / "lib" / version / "this.py"
        self.stdlib_hash = hashlib.sha256(self.stdlib_file.read_bytes()).hexdigest()
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.tcp.setblocking(False)
        self.unix_path = str(self.dir / "listener.sock")
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o777)
        self.unix.listen()
        self.unix.setblocking(False)
        self.victims = [subprocess.Popen(["sleep", "600"], user=uid, group=uid, extra_groups=[])
                        if os.geteuid() == 0 else subprocess.Popen(["sleep", "600"])
                        for uid in (0, JAIL_UID, WORKER_UID)]
        self.meta = {"canary_files": [str(data / "secret.txt"), str(dataset), str(database)],
                     "database_files": [str(database), str(database) + "-wal"], "dataset_files": [str(dataset)],
                     "victims": [p.pid for p in self.victims], "tcp_port": self.tcp.getsockname()[1],
                     "unix_socket": self.unix_path, "write_target": str(self.write_target),
                     "stdlib_file": str(self.stdlib_file)}

    def close(self) -> None:
        for proc in self.victims:
            proc.kill()
            proc.wait()
        self.tcp.close()
        self.unix.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def assert_untouched(self) -> None:
        assert not self.write_target.exists(), "a jailed program wrote outside its scratch dir"
        assert hashlib.sha256(self.stdlib_file.read_bytes()).hexdigest() == self.stdlib_hash
        assert all(proc.poll() is None for proc in self.victims), "a jailed program killed a process outside"
        for listener in (self.tcp, self.unix):
            with pytest.raises(BlockingIOError):
                listener.accept()


@pytest.fixture(scope="module")
def targets() -> Iterator[Targets]:
    found = Targets()
    yield found
    found.close()


def _closed_ancestor(path: Path) -> Path | None:
    """The first directory on the way to `path` that other users cannot enter, if any."""
    on_the_way = reversed([path, *path.parents][:-1])
    return next((p for p in on_the_way if p.is_dir() and not os.stat(p).st_mode & stat.S_IXOTH), None)


def _unprivileged_command(meta: dict) -> list[str] | str:
    """The driver command as WORKER_UID (or why it cannot run). An interpreter under a private dir such as /root
    (pyenv) is made reachable in a private mount namespace: a tmpfs over that dir shows only the interpreter's tree."""
    setpriv = ["setpriv", f"--reuid={WORKER_UID}", f"--regid={WORKER_UID}", "--clear-groups", "--"]
    driver = [sys.executable, str(Path(__file__).with_name("hostile_cases.py")), json.dumps(meta)]
    for needed in (ROOT, Path(sys.prefix)):
        if (closed := _closed_ancestor(needed)) is not None:
            return f"{needed} lies under {closed}, which uid {WORKER_UID} cannot enter"
    prefix = Path(python_runtime()[0])
    closed = _closed_ancestor(prefix)
    if closed is None:
        return setpriv + driver
    if shutil.which("unshare") is None or closed == prefix:
        return f"the interpreter lies under {closed}, which uid {WORKER_UID} cannot enter"
    keep = closed / prefix.relative_to(closed).parts[0]  # e.g. /root/.pyenv: the only thing shown under /root
    script = (f"set -e; mkdir -p /run/streamrl-keep; mount --bind {keep} /run/streamrl-keep; "
              f"mount -t tmpfs -o mode=0755 tmpfs {closed}; mkdir -p {keep}; mount --move /run/streamrl-keep {keep}; "
              'exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *setpriv, *driver]


@pytest.fixture(scope="module")
def root_results(targets: Targets) -> dict[str, dict]:
    os.environ["STREAMRL_SECRET_KEY"] = targets.canary  # the parent's environment must not reach the jail
    try:
        return run_all(targets.meta)
    finally:
        del os.environ["STREAMRL_SECRET_KEY"]


@pytest.fixture(scope="module")
def unprivileged_results(targets: Targets, root_results: dict[str, dict]) -> dict[str, dict]:
    if os.geteuid() != 0:
        pytest.skip("the unprivileged run needs root to switch to the worker user (this run already is unprivileged)")
    command = _unprivileged_command(targets.meta)
    if isinstance(command, str):
        pytest.skip(command)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
           "STREAMRL_SECRET_KEY": targets.canary, "HOME": "/nonexistent"}
    done = subprocess.run(command, capture_output=True, env=env, timeout=240, cwd="/")
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    return json.loads(done.stdout)


def check(case: Case, result: dict, targets: Targets) -> None:
    assert targets.canary not in json.dumps(result), f"{case.name} leaked the canary: {result}"
    assert result["mode"] == "jail"
    value, _, error = result["attack"]
    if case.expect == "contained":
        assert error is None and value == 0.0, result
    elif case.expect.startswith("error:"):
        assert error is not None and case.expect[len("error:"):] in error and value == 0.0, result
    assert len(result["output"]) <= 4096 and (error is None or len(error) <= 500)
    if case.recovers:
        assert result["after"] == [1.0, {}, None], result
    targets.assert_untouched()


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_contained_with_root_parent(case: Case, root_results: dict, targets: Targets) -> None:
    check(case, root_results[case.name], targets)


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_contained_with_unprivileged_parent(case: Case, unprivileged_results: dict, targets: Targets) -> None:
    check(case, unprivileged_results[case.name], targets)


def test_values_are_clamped_and_protections_reported(root_results: dict) -> None:
    assert root_results["huge-float-clamped"]["attack"] == [1e6, {"a": 1e6, "b": -1e6, "reward": 1e6}, None]
    protections = root_results["fork"]["protections"]
    assert {"bwrap", "pid-ns", "net-ns", "seccomp", f"uid={JAIL_UID}", "rlimit-nproc=0"} <= set(protections)
    assert "x" * 500 in root_results["big-stdout"]["output"]  # user output is kept, bounded, never parsed


def test_unprivileged_parent_builds_the_jail_in_a_user_namespace(unprivileged_results: dict) -> None:
    protections = unprivileged_results["fork"]["protections"]
    assert {"bwrap", "userns", "pid-ns", "net-ns", "seccomp", "rlimit-nproc=0"} <= set(protections)
    assert "cap-drop" not in protections  # i.e. bwrap really ran as the worker user, not as root
