"""`streamrl datasets register NAME --hub ID --split S [--wait]` against the real API, whose Hub endpoint is the
local file server of tests/cli/conftest.py serving `acme/cli-prompts`."""

from __future__ import annotations

import json

from .conftest import Invoke


def test_register_a_hub_dataset_split_and_wait(cli: Invoke, owner: str) -> None:
    ready = cli("datasets", "register", "hub-prompts", "--hub", "acme/cli-prompts", "--split", "train", "--wait")
    assert ready.exit_code == 0, ready.stderr
    assert "'hub-prompts' from acme/cli-prompts[train]@main: ready: 2 rows" in ready.stdout
    dataset_id = ready.stdout.split()[1]
    assert "ready" in cli("datasets", "list").stdout
    rows = cli("datasets", "rows", dataset_id).stdout.splitlines()
    assert [json.loads(r)["answer"] for r in rows] == ["7", "10"]
    unknown = cli("datasets", "register", "hub-x", "--hub", "acme/cli-prompts", "--split", "test", "--wait")
    assert unknown.exit_code == 1
    assert "failed: no files for split 'test' in acme/cli-prompts; splits found: train" in unknown.stdout
