"""Running and pending instances counted apart in `GET /jobs/{id}`, `GET /jobs`, `jobs get` and `jobs list` (a real
API server on Postgres; the instance rows written as the controller and the instances write them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from backend.db.enums import InstanceStatus
from backend.db.models import GenerationInstance
from backend.db.session import make_engine, session_scope

from .conftest import Invoke, Server
from .test_cli_live import _job_setup

pytestmark = pytest.mark.integration


def _instances(database_url: str, job_id: int) -> None:
    """2 heart-beating, 4 asked for and never picked up, 1 silent for 5 minutes."""
    now = datetime.now(UTC)
    beats = [now, now] + [None] * 4 + [now - timedelta(minutes=5)]
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        for k, beat in enumerate(beats):
            status = InstanceStatus.running if beat is not None else InstanceStatus.starting
            session.add(GenerationInstance(job_id=job_id, instance_id=f"gen-{k}", status=status, heartbeat_at=beat))
    engine.dispose()


def test_pending_and_silent_instances_are_not_counted_running(cli: Invoke, owner: str, api_server: Server,
                                                                tmp_path: Path) -> None:
    job_id = _job_setup(cli, api_server, tmp_path)
    _instances(api_server.database_url, job_id)

    job = cli("--json", "jobs", "get", str(job_id)).json()
    assert isinstance(job, dict) and (job["running_instances"], job["pending_instances"]) == (2, 4), job
    listed = cli("--json", "jobs", "list").json()
    assert isinstance(listed, dict)
    row = next(j for j in listed["data"] if j["id"] == job_id)
    assert (row["running_instances"], row["pending_instances"]) == (2, 4), row

    fields = [line.split() for line in cli("jobs", "get", str(job_id)).stdout.splitlines()]
    assert ["running_instances", "2"] in fields and ["pending_instances", "4"] in fields, fields
    table = cli("jobs", "list").stdout.splitlines()
    header = table[0].split()
    assert "PENDING_INSTANCES" in header, table[0]
    mine = next(line.split() for line in table if line.split()[:1] == [str(job_id)])
    assert mine[header.index("RUNNING_INSTANCES")] == "2" and mine[header.index("PENDING_INSTANCES")] == "4", table
