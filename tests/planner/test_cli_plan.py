"""`streamrl plan` runs the planner locally and prints the allocation and per-mode predictions."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from backend.planner.schemas import PlanRequest
from backend.planner.service import make_plan
from streamrl.cli.main import app

runner = CliRunner()
ARGS = ["plan", "--model", "7B", "-n", "8", "--prompts", "32", "--group-size", "4", "--max-tokens", "4000",
        "--median", "600"]


def test_plan_prints_allocation_and_modes() -> None:
    result = runner.invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    assert "gen_devices" in result.output and "colocated" in result.output and "async" in result.output


def test_plan_json_and_errors() -> None:
    result = runner.invoke(app, ["--json", *ARGS, "--mode", "async"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["predicted"]["mode"] == "async"
    bad = runner.invoke(app, ["plan", "--gen-device", "B300"])
    assert bad.exit_code != 0 and "unknown device 'B300'" in bad.output
    bad_mode = runner.invoke(app, ["plan", "--mode", "fast"])
    assert bad_mode.exit_code != 0 and "mode" in bad_mode.output


def test_plan_takes_round_robin_and_max_staleness() -> None:
    options = ["--mode", "async", "--dispatch", "round_robin", "--max-staleness", "3"]
    result = runner.invoke(app, ["--json", *ARGS, *options])
    assert result.exit_code == 0, result.output
    predicted = json.loads(result.output)["predicted"]
    assert predicted["mode"] == "async"
    # the options reach the simulation: its prediction is the planner's for round_robin and staleness 3, and
    # differs from the default dispatch's
    default = runner.invoke(app, ["--json", *ARGS, "--mode", "async", "--max-staleness", "3"])
    assert json.loads(default.output)["predicted"] != predicted
    same = {"model_size": "7B", "clusters": [{"device": "H800", "count": 8}], "prompts_per_iteration": 32,
            "group_size": 4, "lengths": {"max_tokens": 4000, "median": 600}}
    wanted = make_plan(PlanRequest(**same, mode="async", dispatch="round_robin", max_staleness=3))
    assert predicted == pytest.approx(wanted.predicted.model_dump())
    bad = runner.invoke(app, [*ARGS, "--max-staleness", "0"])
    assert bad.exit_code != 0 and "max_staleness" in bad.output
    helped = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert "random | round_robin | skew_aware" in helped.output  # the choices of contract.spec


def test_plan_takes_shared_jobs() -> None:
    result = runner.invoke(app, ["--json", *ARGS, "--mode", "async", "--shared-jobs", "4"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["predicted"]["shared_jobs"] == 4 and plan["per_mode"]["colocated"]["shared_jobs"] == 1
    same = {"model_size": "7B", "clusters": [{"device": "H800", "count": 8}], "prompts_per_iteration": 32,
            "group_size": 4, "lengths": {"max_tokens": 4000, "median": 600}}
    wanted = make_plan(PlanRequest(**same, mode="async", shared_jobs=4))
    assert plan["predicted"] == pytest.approx(wanted.predicted.model_dump())
    assert plan["allocation"]["cost_per_hour"] == pytest.approx(wanted.allocation.cost_per_hour)
    alone = json.loads(runner.invoke(app, ["--json", *ARGS, "--mode", "async"]).output)
    assert plan["allocation"]["cost_per_hour"] < alone["allocation"]["cost_per_hour"]
    printed = runner.invoke(app, [*ARGS, "--mode", "async", "--shared-jobs", "4"])
    assert printed.exit_code == 0 and "shared by 4 jobs" in printed.output, printed.output
    bad = runner.invoke(app, [*ARGS, "--mode", "colocated", "--shared-jobs", "2"])
    assert bad.exit_code != 0 and "shared_jobs" in bad.output and "colocated" in bad.output


def test_plan_names_the_fastest_mode_when_another_was_asked() -> None:
    args = ["plan", "--model", "7B", "-n", "16", "--mode", "sync", "--prompts", "256", "--group-size", "8"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "recommended: async" in result.output and "vs sync" in result.output
