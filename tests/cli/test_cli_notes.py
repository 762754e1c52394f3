"""`streamrl jobs tag | note` and `jobs list --tag / --search` against a real API server."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Invoke, Server
from .test_cli_live import _job_setup

pytestmark = pytest.mark.integration


def test_tag_note_and_filter(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    first = _job_setup(cli, api_server, tmp_path)
    second = _job_setup(cli, api_server, tmp_path)
    tagged = cli("jobs", "tag", str(first), "sweep", "baseline")
    assert tagged.exit_code == 0, tagged.stderr
    assert f"job {first} 'cli-test': tags baseline, sweep" in tagged.stdout
    assert cli("jobs", "tag", str(first), "--remove", "baseline").exit_code == 0
    assert cli("jobs", "tag", str(second), "other").exit_code == 0
    notes = tmp_path / "notes.md"
    notes.write_text("Diverged at iteration 40.\nTry a lower lr.")
    noted = cli("jobs", "note", str(first), "--file", str(notes))
    assert noted.exit_code == 0 and "Try a lower lr." in noted.stdout

    listed = cli("jobs", "list", "--tag", "sweep")
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert "TAGS" in lines[0] and len(lines) == 2 and lines[1].split()[0] == str(first)
    searched = cli("--json", "jobs", "list", "--search", "DIVERGED")
    page = searched.json()
    assert isinstance(page, dict) and [job["id"] for job in page["data"]] == [first]
    assert page["data"][0]["tags"] == ["sweep"] and page["data"][0]["notes"].startswith("Diverged")
    shown = cli("jobs", "note", str(first))  # no text: show
    assert "Diverged at iteration 40." in shown.stdout
    assert cli("jobs", "note", str(first), "--clear").exit_code == 0
    assert "notes:" not in cli("jobs", "note", str(first)).stdout
    assert cli("--json", "jobs", "list", "--search", "diverged").json() == {"data": [], "count": 0}

    bad = cli("jobs", "tag", str(first), "has space")
    assert bad.exit_code == 1 and "add_tags" in bad.stderr and "Traceback" not in bad.stderr
    missing = cli("jobs", "tag", "999999", "x")
    assert missing.exit_code == 1 and "404" in missing.stderr
    both = cli("jobs", "note", str(first), "text", "--clear")
    assert both.exit_code == 1 and "not several" in both.stderr
