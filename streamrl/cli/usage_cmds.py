"""`streamrl usage` (GET /usage), `streamrl jobs limits` (a job's limits), `streamrl jobs eta` (a job's ETA and cost)
and `streamrl team budget` (the team's monthly device-hours): docs/user-guide.md#usage-and-budgets."""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_fields, print_table
from streamrl.cli.errors import CLIError
from streamrl.cli.jobs import jobs_app
from streamrl.cli.teams import team_app

GROUPINGS = ("team", "job", "key", "day")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3f}"


def usage(
    ctx: typer.Context,
    group_by: str = typer.Option("team", "--by", help="team | job | key | day"),
    start: str | None = typer.Option(None, "--from", help="ISO date or time, inclusive (default: start of month)"),
    end: str | None = typer.Option(None, "--to", help="ISO date or time, exclusive (default: now)"),
    job_id: int | None = typer.Option(None, "--job", help="only this job's usage"),
    key_id: int | None = typer.Option(None, "--key", help="only this API key's usage"),
    as_csv: bool = typer.Option(False, "--csv", help="print CSV"),
) -> None:
    """The team's usage: device-hours by pool and tokens, grouped by team, job, API key or day."""
    if group_by not in GROUPINGS:
        raise CLIError(f"--by must be one of {', '.join(GROUPINGS)} (got {group_by!r})")
    query: dict[str, Any] = {"group_by": group_by, "start": start, "end": end, "job_id": job_id, "key_id": key_id}
    with client(ctx) as api:
        if as_csv:
            typer.echo(api.usage_csv(**query), nl=False)
            return
        answer = api.usage(**query)
    if emit_json(ctx, answer):
        return
    rows = [{"id": r["id"], "name": r["name"], "gen_device_h": _hours(r["generation_device_seconds"]),
             "train_device_h": _hours(r["training_device_seconds"]), "device_h": _hours(r["device_seconds"]),
             "tokens_generated": r["tokens_generated"], "tokens_trained": r["tokens_trained"]}
            for r in answer["rows"]]
    typer.echo(f"usage from {answer['start']} to {answer['end']} by {group_by}")
    print_table(rows, ["id", "name", "gen_device_h", "train_device_h", "device_h", "tokens_generated",
                       "tokens_trained"])
    budget = answer["budget"]
    limit = budget["max_device_hours_per_month"]
    typer.echo(f"this month: {budget['used_device_hours_this_month']:.3f} device-hours used"
               + (f" of {limit:g} (max_device_hours_per_month)" if limit is not None else " (no monthly budget)"))


@jobs_app.command("limits")
def limits(
    ctx: typer.Context,
    job_id: int,
    max_device_seconds: float | None = typer.Option(None, "--max-device-seconds", help="device-seconds of both "
                                                    "pools; omitted: no such limit"),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="tokens generated plus trained; omitted: "
                                          "no such limit"),
) -> None:
    """Replace a job's limits (a job paused by a limit resumes once it has room); with no option, show them."""
    with client(ctx) as api:
        if max_device_seconds is None and max_tokens is None:
            job = api.get_job(job_id)
        else:
            job = api.set_job_limits(job_id, max_device_seconds=max_device_seconds, max_tokens=max_tokens)
        used = api.usage(group_by="job", job_id=job_id, start="2000-01-01")
    if emit_json(ctx, job.get("spec", {}).get("limits")):
        return
    rows = used["rows"]
    spent = rows[0] if rows else {"device_seconds": 0.0, "tokens_generated": 0, "tokens_trained": 0}
    print_fields({"job": job_id, "status": job.get("status"),
                  **{f"limits.{k}": v for k, v in (job.get("spec", {}).get("limits") or {}).items()},
                  "used device_seconds": f"{spent['device_seconds']:.1f}",
                  "used tokens": spent["tokens_generated"] + spent["tokens_trained"]})


@jobs_app.command("eta")
def eta(ctx: typer.Context, job_id: int) -> None:
    """When a job should finish (remaining iterations x the recent iterations' median time) and what it costs
    (device-seconds so far per pool, projected to its last iteration, against the job's and the team's budgets)."""
    with client(ctx) as api:
        answer = api.job_eta(job_id)
    if emit_json(ctx, answer):
        return
    used = answer["usage"]
    projected, per = answer["projected_device_seconds"], answer["device_seconds_per_iteration"]
    limit = answer["team_max_device_hours_per_month"]
    print_fields({
        "iterations": f"{answer['iterations_done']} of {answer['iterations_total'] or '-'}",
        "eta": (answer["note"] or "-") if answer["eta_s"] is None else
        f"{answer['eta_s']:.0f} s ({answer['remaining_iterations']} iterations x "
        f"{answer['seconds_per_iteration'] or 0:.1f} s, {answer['basis'] or 'finished'})",
        "device_seconds": f"{used['device_seconds']:.1f} (generation {used['generation_device_seconds']:.1f}, "
                          f"training {used['training_device_seconds']:.1f})",
        "tokens": f"{used['tokens_generated']} generated, {used['tokens_trained']} trained",
        "projected_device_seconds": "-" if projected is None else f"{projected:.1f} ({per or 0:.1f} per iteration)",
        "limits.max_device_seconds": answer["max_device_seconds"],
        "team_device_hours": f"{answer['team_used_device_hours_this_month']:.3f} used this month"
                             + (f" of {limit:g}" if limit is not None else " (no monthly budget)"),
    })


@team_app.command("budget")
def budget(
    ctx: typer.Context,
    device_hours: float | None = typer.Argument(None, min=0, help="max device-hours per calendar month (UTC)"),
    remove: bool = typer.Option(False, "--remove", help="remove the monthly budget"),
) -> None:
    """Show the team's monthly device-hour budget and this month's use, or set it (admin)."""
    with client(ctx) as api:
        if remove or device_hours is not None:
            api.set_monthly_budget(None if remove else device_hours)
        answer = api.usage(group_by="team")
    if not emit_json(ctx, answer["budget"]):
        print_fields(answer["budget"])


def register(app: typer.Typer) -> None:
    """`usage` is a root command; `jobs limits` and `team budget` live on their groups (imported above)."""
    app.command("usage")(usage)
