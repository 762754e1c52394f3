"""`streamrl cluster`: the pools (workers, slots, busy, queued tasks), each worker with its device sets, what holds its
slots and its newest CPU/memory sample, and the team's pending instances with why they wait."""

from __future__ import annotations

from typing import Any

import typer

from streamrl.cli.common import client, emit_json, print_table


def _holder(holder: dict[str, Any]) -> str:
    if holder.get("shared"):
        own = holder.get("own_jobs") or []
        return f"shared LoRA process (your jobs {', '.join(map(str, own))})" if own else "shared (other teams)"
    if holder.get("job_id") is None:
        return "other team"
    where = holder.get("instance_id") or (f"rank {holder['rank']}" if holder.get("rank") is not None else "driver")
    return f"job {holder['job_id']} {where}"


def cluster(ctx: typer.Context) -> None:
    """Workers by pool and node, their slots and who holds them, CPU/memory now, queues, pending instances."""
    with client(ctx) as api:
        view = api.cluster()
    if emit_json(ctx, view):
        return
    print_table(view["pools"], ["pool", "workers", "slots", "busy", "queue_depth"], empty="(no pools)")
    typer.echo("")
    rows = []
    for worker in view["workers"]:
        newest = (worker.get("samples") or [{}])[-1]
        rows.append({"node": worker["node"], "pools": ",".join(worker["pools"]), "slots": worker["slots"],
                     "busy": worker["busy"], "devices": ";".join(worker["devices"]) or None,
                     "cpu%": newest.get("cpu_percent"), "mem_mb": newest.get("memory_mb"),
                     "held_by": ", ".join(_holder(h) for h in worker["holders"]) or None})
    print_table(rows, ["node", "pools", "slots", "busy", "devices", "cpu%", "mem_mb", "held_by"],
                empty="(no worker registered: start one with `streamrl worker --pool generation`)")
    if view["pending"]:
        typer.echo("\npending instances:")
        for item in view["pending"]:
            typer.echo(f"  job {item['job_id']} {item['instance_id']} ({item['waited_s']:.0f} s): {item['reason']}")


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
