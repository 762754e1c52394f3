"""`streamrl jobs fork ID --iteration N --set KEY=VALUE` against a real API server: the fork shows its parent in
`jobs get`; a missing iteration is a one-line error naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from backend.services.job_data import record_checkpoint

from .conftest import Invoke, Server
from .test_cli_live import _job_setup

pytestmark = pytest.mark.integration


def test_fork_from_a_checkpoint_with_a_new_lr(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    parent = _job_setup(cli, api_server, tmp_path)
    directory = api_server.data_dir / "artifacts" / "jobs" / str(parent) / "checkpoints" / "iter_000001"
    directory.mkdir(parents=True)
    (directory / "trainer_state.pt").write_bytes(b"state")
    engine = create_engine(api_server.database_url)
    with Session(engine) as session, session.begin():
        record_checkpoint(session=session, job_id=parent, iteration=1, path=str(directory))
    engine.dispose()

    forked = cli("--json", "jobs", "fork", str(parent), "--iteration", "1", "--set", "training.lr=2e-6",
                 "--set", "name=lower-lr")
    assert forked.exit_code == 0, forked.stderr
    fork = forked.json()
    assert isinstance(fork, dict) and fork["name"] == "lower-lr" and fork["spec"]["training"]["lr"] == 2e-6
    shown = cli("jobs", "get", str(fork["id"]))
    assert shown.exit_code == 0, shown.stderr
    assert re.search(rf"^parent_job_id\s+{parent}$", shown.stdout, re.M), shown.stdout
    assert re.search(r"^parent_iteration\s+1$", shown.stdout, re.M), shown.stdout
    plain = cli("jobs", "fork", str(parent), "-i", "1")
    assert plain.exit_code == 0 and f"forked job {parent} at iteration 1 as job" in plain.stdout

    missing = cli("jobs", "fork", str(parent), "--iteration", "9")
    assert missing.exit_code == 1 and "iteration 9" in missing.stderr and "Traceback" not in missing.stderr
    bad = cli("jobs", "fork", str(parent), "--iteration", "1", "--set", "nokey")
    assert bad.exit_code == 1 and "KEY=VALUE" in bad.stderr
