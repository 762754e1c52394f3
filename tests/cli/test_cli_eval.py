"""`streamrl eval run | get | list` against a real API server (no generation worker here: evaluations stay queued):
a suite from a file, the queued evaluation listed and read back, a suite the server refuses (422 naming the field)
and a model that is not the team's (404)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import Invoke

pytestmark = pytest.mark.integration


def test_eval_run_get_list(cli: Invoke, owner: str, api_server: Any, tmp_path: Path) -> None:
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"evaluation": [{  # a job spec: its first suite
        "name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 2}, "reward": {"type": "exact_match"},
        "samples_per_prompt": 2}]}))
    ran = cli("eval", "run", model, "--suite", str(suite))
    assert ran.exit_code == 0, ran.stderr
    evaluation_id = int(ran.stdout.split()[1])
    assert ran.stdout.strip() == f"evaluation {evaluation_id} queued"
    listed = cli("eval", "list")
    assert listed.exit_code == 0 and model in listed.stdout and "queued" in listed.stdout, listed.stdout
    got = cli("--json", "eval", "get", str(evaluation_id)).json()
    assert got["status"] == "queued" and got["suite"]["samples_per_prompt"] == 2  # type: ignore[index]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "dataset": {"builtin": "arithmetic"}, "reward": {"type": "exact_match"},
                                   "samples_per_prompt": 1, "k": 3}))
    refused = cli("eval", "run", model, "--suite", str(bad))
    assert refused.exit_code == 1 and "422" in refused.stderr and "samples_per_prompt" in refused.stderr
    missing = cli("eval", "run", "job:999999@best", "--suite", str(suite))
    assert missing.exit_code == 1 and "404" in missing.stderr, missing.stderr
