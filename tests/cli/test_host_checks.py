"""What the host lacks, said before anything starts: scripts/host_packages.sh (setup), `streamrl doctor` and the
checks `streamrl up` makes, run on a PATH without bubblewrap and against servers that are not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER_UID = 61234  # an unprivileged user without a login


def _env(tmp_path: Path, path: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMRL_")}
    return {**env, "PATH": path, "PYTHONPATH": str(ROOT), "STREAMRL_DATA_DIR": str(tmp_path / "data"),
            "STREAMRL_CONFIG": str(tmp_path / "cli.json"), **extra}


def _cli(tmp_path: Path, path: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "streamrl.cli.main", *args], env=_env(tmp_path, path, **extra),
                          capture_output=True, text=True, timeout=180, cwd=tmp_path)


def test_setup_without_root_prints_the_bubblewrap_command_and_continues(path_without_bwrap: str,
                                                                         tmp_path: Path) -> None:
    command = ["bash", str(ROOT / "scripts" / "host_packages.sh")]
    if os.geteuid() == 0:  # as root it would install the package: run it as a user who cannot
        command = ["setpriv", f"--reuid={WORKER_UID}", f"--regid={WORKER_UID}", "--clear-groups", "--", *command]
    done = subprocess.run(command, env={"PATH": path_without_bwrap, "LANG": "C.UTF-8"}, capture_output=True,
                          text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr  # setup carries on: the rest of the platform works without it
    assert "run: sudo apt-get install -y --no-install-recommends bubblewrap" in done.stderr


def test_setup_with_bubblewrap_present_installs_nothing() -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "host_packages.sh")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "host packages present" in done.stdout, done.stdout + done.stderr


def test_doctor_names_the_missing_jail_and_its_fix(path_without_bwrap: str, tmp_path: Path) -> None:
    done = _cli(tmp_path, path_without_bwrap, "doctor")
    assert done.returncode == 0, done.stdout + done.stderr  # python rewards refused, everything else runs
    lines = {line.split(":")[0].split(maxsplit=1)[-1]: line for line in done.stdout.splitlines()}
    assert lines["reward jail"].startswith("MISSING reward jail: python rewards are refused: bubblewrap is not "
                                           "installed"), done.stdout
    assert "fix: apt-get install -y bubblewrap" in lines["reward jail"]
    for name in ("redis", "database", "disk"):
        assert lines[name].startswith(f"ok       {name}: "), done.stdout
    assert {"user namespaces", "GPUs", "vLLM", "privileges"} <= set(lines), done.stdout


def test_doctor_json_and_a_blocking_piece_exit_1(tmp_path: Path) -> None:
    done = _cli(tmp_path, os.environ["PATH"], "--json", "doctor", STREAMRL_REDIS_URL="redis://127.0.0.1:1/0")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {check["name"]: check for check in json.loads(done.stdout)}
    assert checks["redis"]["ok"] is False and checks["redis"]["blocking"] is True
    assert "cannot reach STREAMRL_REDIS_URL" in checks["redis"]["detail"] and checks["redis"]["fix"]
    assert checks["reward jail"]["ok"] is True, checks["reward jail"]


@pytest.mark.integration
def test_up_prints_each_missing_piece_with_its_fix_before_starting(path_without_bwrap: str, tmp_path: Path) -> None:
    done = _cli(tmp_path, path_without_bwrap, "up", "--no-workers", "--port", "1",
                STREAMRL_REDIS_URL="redis://127.0.0.1:1/0",
                STREAMRL_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stderr
    assert "up: MISSING reward jail: python rewards are refused: bubblewrap is not installed" in out, out
    assert "up: MISSING redis: cannot reach STREAMRL_REDIS_URL" in out and "up: MISSING database:" in out, out
    assert "cannot start: redis, database missing" in out, out
    assert "Traceback" not in out and "started api" not in done.stdout  # nothing was started
