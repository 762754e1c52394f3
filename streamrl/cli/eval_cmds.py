"""`streamrl eval run | get | list`: evaluation suites on demand (docs/user-guide.md#evaluation-suites).

    streamrl eval run chat-tiny --suite suite.yaml --wait       # a registered model (a baseline)
    streamrl eval run job:12@best --suite held                  # a job's checkpoint, by one of the job's suites
    streamrl eval get 7 --rows                                  # summary and per-row outputs and scores
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
import yaml

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError

eval_app = typer.Typer(help="Evaluation suites: run one on a model or checkpoint, read results.", no_args_is_help=True)
POLL_S = 2.0


def _suite(value: str) -> str | dict[str, Any]:
    """A YAML/JSON file holding one suite (or a job spec: its first suite), else the name of a job's suite."""
    path = Path(value)
    if not path.is_file():
        return value
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CLIError(f"{path} is not valid YAML/JSON: {exc}".replace("\n", " ")) from None
    if isinstance(raw, dict) and isinstance(raw.get("evaluation"), list) and raw["evaluation"]:
        raw = raw["evaluation"][0]
    if not isinstance(raw, dict):
        raise CLIError(f"{path} must hold a suite (name, dataset, reward or grader, ...) or a job spec")
    return raw


def _summary_line(body: dict[str, Any]) -> str:
    summary = body.get("summary") or {}
    if body["status"] != "succeeded":
        return f"evaluation {body['id']}: {body['status']}" + (f" ({body['error']})" if body.get("error") else "")
    return (f"evaluation {body['id']} of {body['model']} on {body['suite_name']}: mean {summary['mean']:.4f}  "
            f"pass@1 {summary['pass@1']:.4f}  pass@{int(summary['k'])} {summary['pass@k']:.4f}  "
            f"({int(summary['prompts'])} prompts, {int(summary['samples'])} samples)")


@eval_app.command("run")
def run(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="a registered model, or job:<id>@best|@last|@<iteration>"),
    suite: str = typer.Option(..., "--suite", "-s", help="a suite file (YAML/JSON), or the name of the job's suite"),
    wait: bool = typer.Option(False, "--wait", help="wait for the result and print it"),
) -> None:
    """Queue an evaluation; it runs on a generation slot."""
    with client(ctx) as api:
        body = api.create_evaluation({"model": model, "suite": _suite(suite)})
        while wait and body["status"] in ("queued", "running"):
            time.sleep(POLL_S)
            body = api.get_evaluation(body["id"])
    if emit_json(ctx, body):
        return
    typer.echo(_summary_line(body) if wait else f"evaluation {body['id']} {body['status']}")
    if body["status"] == "failed":
        raise typer.Exit(1)


@eval_app.command("get")
def get(ctx: typer.Context, evaluation_id: int,
        rows: bool = typer.Option(False, "--rows", help="also each prompt's outputs and scores")) -> None:
    """An evaluation's status and summary (and rows)."""
    with client(ctx) as api:
        body = api.get_evaluation(evaluation_id)
    if emit_json(ctx, body):
        return
    typer.echo(_summary_line(body))
    if rows:
        print_table([{"prompt_id": r["prompt_id"], "scores": " ".join(f"{s:.3g}" for s in r["scores"]),
                      "first output": (r["outputs"] or [""])[0][:60]} for r in body["rows"]],
                    ["prompt_id", "scores", "first output"], empty="(no rows)")


@eval_app.command("list")
def list_(ctx: typer.Context, job: int | None = typer.Option(None, "--job", help="only this job's")) -> None:
    """The team's evaluations, newest first."""
    with client(ctx) as api:
        found = api.list_evaluations(job)
    if emit_json(ctx, found):
        return
    table = [{"id": e["id"], "model": e["model"], "suite": e["suite_name"], "status": e["status"],
              "mean": f"{e['summary']['mean']:.4f}" if e.get("summary") else "",
              "pass@k": f"{e['summary']['pass@k']:.4f}" if e.get("summary") else ""} for e in found]
    print_table(table, ["id", "model", "suite", "status", "mean", "pass@k"], empty="(no evaluations)")


def register(app: typer.Typer) -> None:
    app.add_typer(eval_app, name="eval")
