"""The planner's long-tail estimate with grouped speculative decoding: the tail's steps (a quarter of the batch or
fewer decoding) cost PTL(BS) / the measured tokens per forward pass; a plan from a job uses the job's measurement."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from backend.planner.devices import DEFAULT_DEVICES, model_shape
from backend.planner.lengths import LengthDistribution
from backend.planner.sim_generation import run_instance, speculative_step_costs, step_costs
from backend.planner.simulator import SimConfig, simulate
from contract.skew import PTLProfile

FLAT = PTLProfile(((1, 0.01), (1024, 0.01)))


def test_only_the_tails_steps_get_cheaper() -> None:
    table = step_costs(FLAT, 16)
    spec = speculative_step_costs(table, 16, 2.0)
    assert spec[1:5].tolist() == pytest.approx([0.005] * 4)  # 16 // 4 = 4 rows or fewer: the tail
    assert spec[5:].tolist() == pytest.approx(table[5:].tolist())
    assert speculative_step_costs(table, 16, 1.0) is table
    with pytest.raises(ValueError, match=">= 1"):
        speculative_step_costs(table, 16, 0.5)
    # one long sequence behind 7 short ones: 10 steps at 8 rows, then 90 alone at half the cost
    lengths = np.array([100] + [10] * 7)
    assert run_instance(lengths, 8, table).max() == pytest.approx(1.0)
    assert run_instance(lengths, 8, speculative_step_costs(table, 8, 2.0)).max() == pytest.approx(0.1 + 0.45)


def config(**overrides: object) -> SimConfig:
    base = SimConfig(model=model_shape("7B"), gen_device=DEFAULT_DEVICES["H800"], gen_devices=4, train_devices=4,
                     lengths=LengthDistribution(max_tokens=4000, median=300, sigma=1.2), prompts_per_iteration=32,
                     group_size=8, iterations=3, mode="sync", max_batch_size=64)
    return replace(base, **overrides)  # type: ignore[arg-type]


def test_measured_speedup_shortens_the_simulated_generation() -> None:
    plain = simulate(config()).summary()["gen_seconds"]
    fast = simulate(config(tail_tokens_per_forward=2.5)).summary()["gen_seconds"]
    assert fast < 0.9 * plain


@pytest.mark.integration
def test_plan_from_a_job_uses_its_measured_tail_speedup(app_client: TestClient, pg_backend: Any) -> None:
    from backend.db.models import Iteration, JobSample, Model

    team = pg_backend.make_team()
    member = pg_backend.auth_headers(pg_backend.make_user(team, "member"), team)
    model_dir = pg_backend.settings.artifacts / "models" / uuid.uuid4().hex
    model_dir.mkdir(parents=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pg_backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(model_dir)))
    spec = {"name": "spec", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8}}
    job_id = app_client.post("/api/v1/jobs", json=spec, headers=member).json()["id"]
    with pg_backend.session() as session:
        for i, length in enumerate([20, 30, 40, 50, 60, 2000, 3000]):
            session.add(JobSample(job_id=job_id, iteration=0, sample_id=f"s{i}", prompt="p", response="r",
                                  reward=0.0, length=length, policy_version=0))
    body = {"from_job_id": job_id, "prompts_per_iteration": 16, "group_size": 8, "max_batch_size": 64,
            "clusters": [{"device": "H800", "count": 4}], "mode": "sync"}

    def gen_seconds(**extra: Any) -> float:
        r = app_client.post("/api/v1/plans", json={**body, **extra}, headers=member)
        assert r.status_code == 200, r.text
        return float(r.json()["predicted"]["gen_seconds"])

    plain = gen_seconds()  # the job recorded no speculation yet
    with pg_backend.session() as session:
        for it, speedup in enumerate([2.0, 3.0, 3.0], start=1):
            session.add(Iteration(job_id=job_id, iteration=it, metrics={"tail_tokens_per_forward": speedup}))
    measured = gen_seconds()
    assert measured < 0.9 * plain
    assert measured == pytest.approx(gen_seconds(tail_tokens_per_forward=3.0))  # the median of the job's
    assert gen_seconds(tail_tokens_per_forward=1.0) == pytest.approx(plain)  # given: the request's value wins
    bad = app_client.post("/api/v1/plans", json={**body, "tail_tokens_per_forward": 0.5}, headers=member)
    assert bad.status_code == 422 and "tail_tokens_per_forward" in bad.text


def test_cli_plan_takes_the_tail_speedup() -> None:
    from typer.testing import CliRunner

    from streamrl.cli.main import app

    args = ["--json", "plan", "--model", "7B", "-n", "8", "--prompts", "32", "--group-size", "8", "--max-tokens",
            "4000", "--median", "300", "--sigma", "1.2"]
    runner = CliRunner()
    plain, fast = (runner.invoke(app, [*args, "--tail-tokens-per-forward", value]) for value in ("1", "3"))
    assert plain.exit_code == 0 and fast.exit_code == 0, plain.output + fast.output
    assert json.loads(fast.output)["predicted"]["gen_seconds"] < json.loads(plain.output)["predicted"]["gen_seconds"]
    bad = runner.invoke(app, [*args, "--tail-tokens-per-forward", "0.5"])
    assert bad.exit_code != 0 and "tail_tokens_per_forward" in bad.output
