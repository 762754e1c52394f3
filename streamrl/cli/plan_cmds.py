"""`streamrl plan`: split devices between generation and training and predict the job's speed (runs locally:
the planner and simulator are pure Python; `--data-dir` applies the server's device-catalog overrides)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import typer
from pydantic import ValidationError

from backend.planner import catalog_store
from backend.planner.schemas import PlanRequest
from backend.planner.service import make_plan
from contract.catalog import DispatchPolicy
from contract.spec import AlgorithmName, Mode
from streamrl.cli.common import emit_json, print_fields, print_table
from streamrl.cli.errors import CLIError


def _choices(literal: object) -> str:
    return " | ".join(get_args(literal))


def plan(
    ctx: typer.Context,
    model_size: str = typer.Option("7B", "--model", help="7B, 14B, 32B, 72B or billions of parameters"),
    gen_device: str = typer.Option("H800", help="device of cluster 0 (generation; also training with one cluster)"),
    devices: int = typer.Option(8, "--devices", "-n", help="devices in cluster 0"),
    train_device: str | None = typer.Option(None, help="second cluster's device: training runs there"),
    train_devices: int = typer.Option(0, help="devices in the training cluster (with --train-device)"),
    mode: str = typer.Option("sync", help=_choices(Mode)),
    max_staleness: int = typer.Option(1, help="async: policy versions a sample may lag"),
    max_tokens: int = typer.Option(20_000, help="longest response"),
    median: float = typer.Option(2_000.0, help="median response length (lognormal)"),
    sigma: float = typer.Option(1.0, help="lognormal shape: larger = longer tail"),
    prompts: int = typer.Option(256, help="prompts per iteration"),
    group_size: int = typer.Option(8, help="samples per prompt"),
    algorithm: str = typer.Option("grpo", help=_choices(AlgorithmName)),
    dispatch: str = typer.Option("skew_aware", help=_choices(DispatchPolicy)),
    tp: int | None = typer.Option(None, help="tensor parallelism per generation instance (default: fit memory)"),
    elastic: bool = typer.Option(False, help="simulate the autoscaler resizing generation"),
    length_growth: float = typer.Option(0.0, help="response-length growth per iteration (0.1 = +10%)"),
    shared_jobs: int = typer.Option(
        1, help="LoRA jobs of this shape on the same base model sharing the generation instances (this one "
                "included): their rows share each instance's batch and they split its cost (sync/async only)"),
    tail_tokens_per_forward: float | None = typer.Option(
        None, help="grouped speculative decoding: measured tokens per forward pass in the tail (a job's "
                   "tail_tokens_per_forward metric); the tail's tokens cost PTL(BS) / this"),
    data_dir: Path | None = typer.Option(None, help="server data dir whose device_catalog.json overrides apply"),
) -> None:
    """Plan generation/training devices (paper Algorithm 1) and simulate colocated/sync/async on the result."""
    clusters = [{"device": gen_device, "count": devices}]
    if train_device:
        clusters.append({"device": train_device, "count": train_devices})
    try:
        request = PlanRequest.model_validate({
            "model_size": model_size, "clusters": clusters, "mode": mode, "max_staleness": max_staleness, "tp": tp,
            "algorithm": algorithm,
            "dispatch": dispatch, "prompts_per_iteration": prompts, "group_size": group_size, "elastic": elastic,
            "length_growth": length_growth, "shared_jobs": shared_jobs,
            "tail_tokens_per_forward": tail_tokens_per_forward,
            "lengths": {"max_tokens": max_tokens, "median": median, "sigma": sigma},
        })
        result = make_plan(request, catalog_store.load_catalog(data_dir))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise CLIError(f"invalid plan request: {problems}") from None
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if emit_json(ctx, result.model_dump()):
        return
    typer.echo(f"model {result.model['name']} ({result.model['params_b']}B params)")
    print_fields(result.allocation.model_dump())
    if shared_jobs > 1:
        typer.echo(f"generation instances shared by {shared_jobs} jobs: each step decodes all their rows, "
                   f"cost_per_hour counts 1/{shared_jobs} of the generation devices (colocated never shares)")
    if result.estimate:
        typer.echo("Algorithm 1 estimate: " + ", ".join(f"{k} {v:.1f}" for k, v in result.estimate.items()))
    typer.echo("")
    print_table([p.model_dump() for p in result.per_mode.values()],
                ["mode", "iteration_seconds", "gen_seconds", "train_seconds", "samples_per_s",
                 "throughput_per_cost", "gen_bubble_fraction", "train_bubble_fraction",
                 *(["shared_jobs"] if shared_jobs > 1 else [])])
    typer.echo(f"\npredicted ({result.predicted.mode}): {result.predicted.iteration_seconds:.1f} s/iteration, "
               f"{result.predicted.samples_per_s:.3g} samples/s; planned in {result.plan_seconds:.2f} s")
    best = result.per_mode[result.recommended_mode]
    if result.recommended_mode != result.predicted.mode:
        allocation = result.recommended_allocation
        typer.echo(f"recommended: {best.mode} ({best.samples_per_s:.3g} samples/s, "
                   f"{best.samples_per_s / result.predicted.samples_per_s - 1:+.0%} vs {result.predicted.mode}) on "
                   f"{allocation.gen_devices} generation + {allocation.train_devices} training devices")
    else:
        typer.echo(f"recommended: {best.mode} (the fastest simulated mode)")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
