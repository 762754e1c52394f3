"""`streamrl graders run SPEC.yaml --output ... --item ...` against a real API server, with a team API key: the score,
multi's sub-scores, a sample error (exit 1) and an invalid spec (the server's 422 naming the field)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from .conftest import Invoke

pytestmark = pytest.mark.integration
OUT = "{{ sample.output_text }}"


def test_graders_run_with_a_team_key(cli: Invoke, owner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = cli("--json", "keys", "create", "grader-bench")
    assert key.exit_code == 0, key.stderr
    secret = key.json()["secret"]  # type: ignore[index]
    monkeypatch.setenv("STREAMRL_TOKEN", secret)
    spec = tmp_path / "grader.yaml"
    spec.write_text(yaml.safe_dump({"reward": {"type": "multi", "params": {  # a job spec: its `reward` is used
        "graders": {"said": {"type": "string_check", "input": OUT, "reference": "{{ item.city }}",
                             "operation": "ilike"},
                    "words": {"type": "text_similarity", "input": OUT, "reference": "{{ item.full }}",
                              "evaluation_metric": "rouge_1"}},
        "calculate_output": "(said + words) / 2"}}}))
    item = json.dumps({"city": "paris", "full": "the capital is paris"})
    ran = cli("graders", "run", str(spec), "--output", "The capital is Paris", "--item", item)
    assert ran.exit_code == 0, ran.stderr
    # said: "paris" in "the capital is paris" (case-insensitive) = 1; rouge_1 (lower-cased tokens) identical = 1
    assert ran.stdout.splitlines()[:3] == ["reward: 1", "  said: 1", "  words: 1"]
    as_json = cli("--json", "graders", "run", str(spec), "--output", "Lyon", "--item", item).json()
    assert as_json == {"reward": 0.0, "sub_rewards": {"said": 0.0, "words": 0.0}, "passed": None, "error": None}
    missing = cli("graders", "run", str(spec), "--output", "Paris", "--item", '{"city": "paris"}')
    assert missing.exit_code == 1 and "error: grader 'words': item has no 'full'" in missing.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"type": "text_similarity", "params": {
        "input": OUT, "reference": "x", "evaluation_metric": "levenshtein"}}))
    refused = cli("graders", "run", str(bad), "--output", "x")
    assert refused.exit_code == 1 and "evaluation_metric" in refused.stderr and "422" in refused.stderr
    not_json = cli("graders", "run", str(spec), "--output", "x", "--item", "[1]")
    assert not_json.exit_code == 1 and "--item must be a JSON object" in not_json.stderr
