"""`streamrl usage`, `streamrl jobs limits` and `streamrl team budget` against a real API server."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from backend.db.session import make_engine, session_scope
from backend.services.job_data import record_iteration

from .conftest import Invoke, Server
from .test_cli_live import _job_setup

pytestmark = pytest.mark.integration


def test_usage_limits_and_budget(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    engine = make_engine(api_server.database_url)
    with session_scope(engine) as session:  # two recorded iterations: 30 device-seconds each (1 trainer, 2 instances)
        for it in (1, 2):
            record_iteration(session=session, job_id=job_id, iteration=it, metrics={
                "iteration_seconds": 10.0, "instances_live": 2, "tokens_generated": 8.0, "tokens_trained": 20.0})
    engine.dispose()

    table = cli("usage", "--by", "job")
    assert table.exit_code == 0, table.stderr
    row = next(line.split() for line in table.stdout.splitlines() if line.startswith(str(job_id)))
    assert row[2:7] == ["0.011", "0.006", "0.017", "16", "40"]  # device-hours: 40 s, 20 s, 60 s; tokens
    assert "no monthly budget" in table.stdout
    as_csv = list(csv.DictReader(io.StringIO(cli("usage", "--by", "job", "--csv").stdout)))
    assert [(r["id"], float(r["device_seconds"])) for r in as_csv] == [(str(job_id), 60.0)]
    eta = cli("jobs", "eta", str(job_id))  # queued: no ETA; its cost is the recorded iterations'
    assert eta.exit_code == 0, eta.stderr
    assert "no ETA until it runs again" in eta.stdout and "60.0 (generation 40.0, training 20.0)" in eta.stdout
    assert cli("--json", "jobs", "eta", str(job_id)).json()["projected_device_seconds"] is not None
    bad = cli("usage", "--by", "user")
    assert bad.exit_code == 1 and "--by must be one of" in bad.stderr

    limited = cli("jobs", "limits", str(job_id), "--max-device-seconds", "50")
    assert limited.exit_code == 0, limited.stderr
    fields = dict(line.split(None, 1) for line in limited.stdout.replace("used ", "used_").splitlines())
    assert fields["limits.max_device_seconds"] == "50" and fields["used_device_seconds"] == "60.0"
    assert fields["limits.max_tokens"] == "-" and fields["used_tokens"] == "56"
    negative = cli("jobs", "limits", str(job_id), "--max-tokens", "-3")
    assert negative.exit_code == 1 and "max_tokens" in negative.stderr and "Traceback" not in negative.stderr

    quotas = cli("team", "quotas", "--max-device-hours-per-month", "5")
    assert quotas.exit_code == 0 and "max_device_hours_per_month  5\n" in quotas.stdout
    assert cli("team", "budget", "0.01").exit_code == 0  # 36 device-seconds: used up by the 60 recorded
    shown = cli("--json", "team", "budget").json()
    assert isinstance(shown, dict) and shown["max_device_hours_per_month"] == 0.01
    refused = cli("jobs", "submit", str(tmp_path / "spec.json"))
    assert refused.exit_code == 1 and "max_device_hours_per_month" in refused.stderr
    assert cli("team", "budget", "--remove").exit_code == 0
    assert cli("jobs", "submit", str(tmp_path / "spec.json")).exit_code == 0
