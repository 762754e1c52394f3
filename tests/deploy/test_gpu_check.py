"""scripts/gpu_check.sh: it must run unedited the first time a GPU machine is available, so its syntax and its CPU
fallback path (the same platform path: `streamrl up`, a job with p2p weight sync, the RESULT line) run here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import environ_snapshot

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"


def test_gpu_check_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.slow
def test_gpu_check_cpu_path_runs_a_p2p_job_end_to_end(tmp_path: Path) -> None:
    env = {**environ_snapshot(), "PYTHON": sys.executable, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    run = subprocess.run(["bash", str(SCRIPT), "--cpu", "--iterations", "4"], env=env, capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = re.search(r"^RESULT mode=cpu status=succeeded iterations=4 tokens_per_s=([\d.]+) .*"
                       r"weight_sync_s=([\d.]+)", run.stdout, re.MULTILINE)
    assert result is not None, run.stdout[-3000:]
    assert float(result.group(1)) > 0
