"""The process supervisor behind `streamrl up`: restarts, gives up on a crashing critical child, kills whole groups."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.supervisor import ChildSpec, Supervisor, SupervisorError


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_all_takes_grandchildren_too(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; "
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    sup = Supervisor(echo=lambda line: None)
    child = sup.start(ChildSpec("parent", [sys.executable, "-c", script]))
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    sup.stop_all(timeout_s=5)
    assert child.poll() is not None
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(grandchild)


def test_crashed_child_is_restarted() -> None:
    lines: list[str] = []
    sup = Supervisor(echo=lines.append)
    first = sup.start(ChildSpec("flaky", [sys.executable, "-c", "raise SystemExit(3)"]))
    first.wait(timeout=20)
    sup.poll()  # notices the exit, schedules a restart in 1 s
    assert any("flaky exited with status 3; restarting in 1s" in line for line in lines)
    time.sleep(1.1)
    sup.poll()
    assert any(line.startswith("restarted flaky") for line in lines)
    sup.stop_all(timeout_s=5)


def test_critical_child_that_keeps_failing_is_fatal() -> None:
    sup = Supervisor(echo=lambda line: None, max_restarts=0)
    proc = sup.start(ChildSpec("api", [sys.executable, "-c", "raise SystemExit(1)"], critical=True))
    proc.wait(timeout=20)
    with pytest.raises(SupervisorError, match="api exited 1 times"):
        sup.poll()
    sup.stop_all(timeout_s=5)


def test_children_die_with_a_killed_supervisor() -> None:
    script = ("import sys, time; from backend.supervisor import ChildSpec, Supervisor; "
              "s = Supervisor(echo=lambda l: None); "
              "p = s.start(ChildSpec('sleeper', [sys.executable, '-c', 'import time; time.sleep(60)'])); "
              "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while not _gone(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child_pid)


def test_a_child_runs_at_its_lower_priority_and_up_lowers_the_workers() -> None:
    """Issue 36, finding 12: `streamrl up`'s workers run below the API's CPU priority (the API keeps its turn)."""
    from streamrl.cli.up import WORKER_NICE, _runtime_children

    sup = Supervisor(echo=lambda line: None)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    try:
        plain = sup.start(ChildSpec("api", sleep))
        lowered = sup.start(ChildSpec("worker", sleep, nice=7))
        base = psutil.Process().nice()
        assert psutil.Process(plain.pid).nice() == base
        assert psutil.Process(lowered.pid).nice() == min(base + 7, 19)
    finally:
        sup.stop_all(timeout_s=5)
    children = {spec.name: spec for spec in _runtime_children({})}
    assert WORKER_NICE > 0
    assert children["worker-generation"].nice == children["worker-training"].nice == WORKER_NICE
    assert children["controller"].nice == 0
