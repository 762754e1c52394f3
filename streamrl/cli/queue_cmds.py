"""`streamrl queue`: the scheduler's queue in order (position, priority, team, the job when it is yours, what it
waits for, ETA, why), then the queue grouped by team and priority. Another team's items show no id or name."""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_table


def _eta(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def queue(ctx: typer.Context) -> None:
    """Every waiting job and session in order, with why it waits; `--json` for the raw answer."""
    with client(ctx) as api:
        listing = api.queue()
    if emit_json(ctx, listing):
        return
    rows: list[dict[str, Any]] = [
        {"pos": item["position"], "priority": item["priority"], "team": item["team"],
         "job": f"{item['job_id']} {item['job_name']}" if item["own"] else None,
         "waiting_for": item["waiting_for"], "eta": _eta(item.get("eta_s")), "reason": item["reason"]}
        for item in listing["items"]]
    print_table(rows, ["pos", "priority", "team", "job", "waiting_for", "eta", "reason"], empty="(nothing waits)")
    if listing["groups"]:
        typer.echo("\nby team and priority:")
        print_table(listing["groups"], ["team", "priority", "waiting", "training_slots", "generation_slots"])
    if listing.get("updated_s") is None:
        typer.echo("\n(no scheduling pass lately: is the controller running? `streamrl up` starts one)")


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)
