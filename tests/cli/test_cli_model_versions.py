"""`streamrl models` versions and delete against a live API (issue 39): a name registered again is its next version,
listed; `models delete NAME` needs --version when the name has several; a version a queued job uses is refused
(409, exit 1) until the job is cancelled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Invoke, Server

pytestmark = pytest.mark.integration


def test_versions_listed_and_deleted(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    path = str(api_server.model_dir("versioned"))
    assert "v1" in cli("models", "register", "pol", path).stdout
    assert "v2" in cli("models", "register", "pol", path).stdout
    listed = [m for m in cli("--json", "models", "list").json()["data"] if m["name"] == "pol"]  # type: ignore[index]
    assert [m["version"] for m in listed] == [2, 1]
    got = cli("models", "download", "pol", "--version", "2", "-o", str(tmp_path / "pol-copy"))
    assert got.exit_code == 0 and "'pol' v2" in got.stdout, got.stderr
    assert (tmp_path / "pol-copy" / "config.json").read_bytes() == (Path(path) / "config.json").read_bytes()
    assert sorted(p.name for p in (tmp_path / "pol-copy").iterdir()) == sorted(p.name for p in Path(path).iterdir())
    again = cli("models", "download", "pol", "--version", "2", "-o", str(tmp_path / "pol-copy"))
    assert again.exit_code == 1 and "pass --force" in again.stderr
    ambiguous = cli("models", "delete", "pol")
    assert ambiguous.exit_code == 1 and "choose one with --version" in ambiguous.stderr
    spec = {"name": "uses-pol", "model": "pol", "dataset": {"builtin": "arithmetic", "num_prompts": 8}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    job = cli("--json", "jobs", "submit", str(tmp_path / "spec.json"))
    assert job.exit_code == 0, job.stderr
    job_id = job.json()["id"]  # type: ignore[index]
    refused = cli("models", "delete", "pol", "--version", "2")
    assert refused.exit_code == 1 and refused.stderr.startswith("error: 409") and f"#{job_id}" in refused.stderr
    assert cli("models", "delete", "pol", "--version", "1").exit_code == 0
    assert cli("jobs", "cancel", str(job_id)).exit_code == 0
    assert cli("models", "delete", "pol").exit_code == 0  # one version left: no --version needed
    assert "pol" not in cli("models", "list").stdout
