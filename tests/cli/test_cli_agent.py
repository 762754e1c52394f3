"""`streamrl jobs submit --agent-url / --agent-code / --agent-requirement` against a live API: the options become the
spec's `agent` (a gateway job), and the API's refusals (an agent URL the egress policy refuses, code without run())
come back naming the field."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from .conftest import Invoke, Server

pytestmark = pytest.mark.integration


def test_submit_takes_the_agent_options(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    model = f"tiny-{uuid.uuid4().hex[:6]}"
    assert cli("models", "register", model, str(api_server.model_dir(model))).exit_code == 0
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "agent", "model": model, "dataset": {"builtin": "arithmetic"},
                                "generation": {"instances": 1}}))
    refused = cli("jobs", "submit", str(spec), "--agent-url", "http://10.1.2.3/agent")
    assert refused.exit_code == 1 and "agent.url" in refused.stderr, refused.stderr
    assert "private-network" in refused.stderr, refused.stderr
    code = tmp_path / "agent.py"
    code.write_text("def main():\n    pass\n")
    refused = cli("jobs", "submit", str(spec), "--agent-code", str(code))
    assert refused.exit_code == 1 and "run(task, base_url, api_key)" in refused.stderr, refused.stderr
    code.write_text("def run(task, base_url, api_key):\n    return 1.0\n")
    submitted = cli("--json", "jobs", "submit", str(spec), "--agent-code", str(code))
    assert submitted.exit_code == 0, submitted.stderr
    job = submitted.json()
    assert isinstance(job, dict)
    assert job["spec"]["agent"]["code"].startswith("def run(") and job["spec"]["environment"]["type"] == "gateway"
    both = cli("jobs", "submit", str(spec), "--agent-code", str(code), "--agent-url", "https://agent.example.com")
    assert both.exit_code != 0 and "not both" in both.stderr, both.stderr
