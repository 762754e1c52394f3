"""`streamrl graders run SPEC.yaml --output TEXT [--item JSON]`: score one sample with a reward/grader spec on the
server (POST /graders/run) before submitting a job. SPEC.yaml holds a reward spec (`type`, `params`), or a job spec
whose `reward` is used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

from streamrl.cli.common import client, emit_json
from streamrl.cli.errors import CLIError

graders_app = typer.Typer(help="Test OpenAI-style graders and other rewards on a sample.", no_args_is_help=True)


def _reward_spec(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CLIError(f"no such file: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CLIError(f"{path} is not valid YAML/JSON: {exc}".replace("\n", " ")) from None
    if isinstance(raw, dict) and "type" not in raw and isinstance(raw.get("reward"), dict):
        raw = raw["reward"]  # a job spec: its reward
    if not isinstance(raw, dict):
        raise CLIError(f"{path} must hold a reward spec (type, params) or a job spec with `reward`")
    return raw


@graders_app.command("run")
def run(
    ctx: typer.Context,
    spec: Path = typer.Argument(..., help="YAML/JSON reward spec, or a job spec (its `reward`)"),
    output: str = typer.Option(..., "--output", "-o", help="the sample's output_text (the model's response)"),
    item: str = typer.Option("{}", "--item", help="the dataset row as a JSON object ({{ item.KEY }})"),
    prompt: str = typer.Option("", "--prompt", help="the prompt, for rewards that read it"),
) -> None:
    """Score OUTPUT against ITEM with the grader in SPEC: the score, multi's sub-scores, pass/fail and any error."""
    try:
        row = json.loads(item)
    except json.JSONDecodeError as exc:
        raise CLIError(f"--item is not JSON: {exc}") from None
    if not isinstance(row, dict):
        raise CLIError("--item must be a JSON object, e.g. '{\"answer\": \"42\"}'")
    with client(ctx) as api:
        result = api.run_grader(_reward_spec(spec), output_text=output, item=row, prompt=prompt)
    if emit_json(ctx, result):
        return
    typer.echo(f"reward: {result['reward']:.6g}")
    for name, value in result["sub_rewards"].items():
        typer.echo(f"  {name}: {value:.6g}")
    if result["passed"] is not None:
        typer.echo(f"passed: {'yes' if result['passed'] else 'no'}")
    if result["error"]:
        typer.echo(f"error: {result['error']}")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(graders_app, name="graders")
