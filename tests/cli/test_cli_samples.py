"""`streamrl samples prompts | compare` against a real API server: the same prompt across runs and checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.db.session import make_engine, session_scope
from backend.services.job_data import record_checkpoint, record_samples

from .conftest import Invoke, Server
from .test_cli_live import _job_setup

pytestmark = pytest.mark.integration
PROMPT = "What is 12 + 30?"


def _store(server: Server, job_id: int, rows: list[tuple[int, str, str, float]]) -> None:
    engine = make_engine(server.database_url)
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job_id, samples=[
            {"iteration": it, "sample_id": f"{job_id}:{it}:{k}", "prompt": prompt, "response": response,
             "reward": reward, "length": 4, "policy_version": it - 1, "instance_id": "gen-0"}
            for k, (it, prompt, response, reward) in enumerate(rows)])
        record_checkpoint(session=session, job_id=job_id, iteration=2, path="/tmp/unused")
    engine.dispose()


def test_prompts_and_compare(cli: Invoke, owner: str, api_server: Server, tmp_path: Path) -> None:
    first = _job_setup(cli, api_server, tmp_path)
    second = _job_setup(cli, api_server, tmp_path)
    _store(api_server, first, [(1, PROMPT, "41", 0.0), (2, PROMPT, "42", 1.0), (1, "Only first", "x", 0.0)])
    _store(api_server, second, [(1, PROMPT, "forty-two\nI think", 0.5)])
    listed = cli("samples", "prompts", "--jobs", f"{first},{second}")
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[1].split()[:3] == ["2", "3", "3"] and lines[1].endswith(PROMPT)
    compared = cli("samples", "compare", "--jobs", f"{first},{second}", "--prompt", PROMPT)
    assert compared.exit_code == 0, compared.stderr
    out = compared.stdout
    assert f"== job {first}" in out and f"== job {second}" in out
    assert "iteration 2 (checkpoint): mean reward 1.000" in out and "[1.000] 42" in out
    assert "[0.500] forty-two I think" in out
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(PROMPT)
    as_json = cli("--json", "samples", "compare", "-j", str(first), "--prompt-file", str(prompt_file)).json()
    assert isinstance(as_json, dict) and as_json["count"] == 2
    assert [g["iteration"] for g in as_json["runs"][0]["iterations"]] == [1, 2]
    missing = cli("samples", "compare", "--jobs", "999999", "--prompt", PROMPT)
    assert missing.exit_code == 1 and "404 job 999999 not found" in missing.stderr
    bad = cli("samples", "prompts", "--jobs", "3,x")
    assert bad.exit_code == 1 and "--jobs wants job ids" in bad.stderr


def test_jobs_samples_filters_and_per_token_record(cli: Invoke, owner: str, api_server: Server,
                                                   tmp_path: Path) -> None:
    """`streamrl jobs samples` with the trajectory explorer's filters, and `--tokens` one sample token by token."""
    job = _job_setup(cli, api_server, tmp_path)
    trace = {"pieces": ["4", "2"], "behaviour": [-0.5, -1.0], "current": [-0.25, -1.0], "versions": [[0, 1], [1, 2]],
             "trained_version": 2, "advantage": 0.75, "loss_mask": None, "mismatch": 0.03}
    engine = make_engine(api_server.database_url)
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job, samples=[
            {"iteration": 3, "sample_id": f"{job}:a", "prompt": PROMPT, "response": "42", "reward": 1.0, "length": 2,
             "policy_version": 1, "instance_id": "gen-0", "tokens": trace, "mismatch": 0.03},
            {"iteration": 3, "sample_id": f"{job}:b", "prompt": PROMPT, "response": "41", "reward": 0.0, "length": 2,
             "policy_version": 2, "instance_id": "gen-0"}])
    engine.dispose()
    filtered = cli("jobs", "samples", str(job), "--min-mismatch", "0.01")
    assert filtered.exit_code == 0, filtered.stderr
    assert f"{job}:a" in filtered.stdout and f"{job}:b" not in filtered.stdout
    assert "mismatch=3.00e-02" in filtered.stdout
    fresh = cli("jobs", "samples", str(job), "--policy-version", "2")
    assert f"{job}:b" in fresh.stdout and f"{job}:a" not in fresh.stdout
    tokens = cli("jobs", "samples", str(job), "--tokens", f"{job}:a")
    assert tokens.exit_code == 0, tokens.stderr
    lines = tokens.stdout.splitlines()
    assert "advantage=0.75" in lines[0] and "trained at v2" in lines[0]
    assert lines[2].split() == ["0", "'4'", "-0.5000", "-0.2500", "+0.2500", "1", "trained"]
    assert lines[3].split() == ["1", "'2'", "-1.0000", "-1.0000", "+0.0000", "2", "trained"]
    missing = cli("jobs", "samples", str(job), "--tokens", f"{job}:b")
    assert missing.exit_code == 1 and "not found" in missing.stderr
