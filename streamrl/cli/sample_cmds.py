"""`streamrl samples prompts | compare`: the same prompt's samples side by side across runs (or one run's
iterations and checkpoints)."""

from __future__ import annotations

from pathlib import Path

import typer

from streamrl.cli.common import client, emit_json, print_table
from streamrl.cli.errors import CLIError

samples_app = typer.Typer(help="The same prompt's samples across runs and checkpoints.", no_args_is_help=True)


def _job_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CLIError(f"--jobs wants job ids separated by commas, e.g. 3,7 (got {text!r})") from None
    if not 1 <= len(ids) <= 8:
        raise CLIError(f"--jobs wants 1 to 8 job ids (got {len(ids)})")
    return ids


@samples_app.command("prompts")
def prompts(
    ctx: typer.Context,
    jobs: str = typer.Option(..., "--jobs", "-j", help="job ids, e.g. 3,7"),
    search: str | None = typer.Option(None, "--search", "-q", help="text in the prompt"),
    limit: int = typer.Option(20, "--limit", min=1, max=500),
) -> None:
    """Prompts the jobs have stored samples of, those in most runs and iterations first."""
    with client(ctx) as api:
        page = api.sample_prompts(_job_ids(jobs), search=search, limit=limit)
    if emit_json(ctx, page):
        return
    rows = [{**row, "prompt": row["prompt"].replace("\n", " ")[:80]} for row in page.get("data", [])]
    print_table(rows, ["runs", "iterations", "samples", "prompt"], empty="(no stored samples)")


@samples_app.command("compare")
def compare(
    ctx: typer.Context,
    jobs: str = typer.Option(..., "--jobs", "-j", help="job ids, e.g. 3,7 (one id: its iterations side by side)"),
    prompt: str | None = typer.Option(None, "--prompt", "-p", help="the prompt text, exactly"),
    prompt_file: Path | None = typer.Option(None, "--prompt-file", help="read the prompt from a file"),
) -> None:
    """One prompt's samples in each job, by iteration (checkpoints marked)."""
    if (prompt is None) == (prompt_file is None):
        raise CLIError("give the prompt with --prompt or --prompt-file (one of them)")
    if prompt_file is not None:
        if not prompt_file.is_file():
            raise CLIError(f"no such file: {prompt_file}")
        prompt = prompt_file.read_text()
    assert prompt is not None
    with client(ctx) as api:
        result = api.samples_by_prompt(_job_ids(jobs), prompt)
    if emit_json(ctx, result):
        return
    for run in result["runs"]:
        typer.echo(f"== job {run['job_id']} {run['name']!r}")
        if not run["iterations"]:
            typer.echo("  (no stored sample of this prompt)")
        for group in run["iterations"]:
            mean = group["reward_mean"]
            typer.echo(f"  iteration {group['iteration']}{' (checkpoint)' if group['checkpoint'] else ''}: "
                       f"mean reward {'-' if mean is None else f'{mean:.3f}'}")
            for sample in group["samples"]:
                reward = "error" if sample.get("reward_error") else f"{sample['reward']:.3f}"
                response = sample["response"].replace("\n", " ")
                typer.echo(f"    [{reward}] {response[:200]}")


def register(app: typer.Typer) -> None:
    app.add_typer(samples_app, name="samples")
