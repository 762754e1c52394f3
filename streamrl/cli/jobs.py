"""`streamrl jobs submit | list | get | cancel | pause | resume | scale | logs | iterations` (tags and notes:
`streamrl.cli.notes_cmds`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import ValidationError

from backend.services.spec_yaml import spec_yaml
from contract.spec import JobSpec
from streamrl.cli.agent_opts import with_agent
from streamrl.cli.common import client, emit_json, globals_of, print_fields, print_table
from streamrl.cli.errors import CLIError, validation_message
from streamrl.cli.follow import follow_job, print_all_events

jobs_app = typer.Typer(help="RL jobs of the current team.", no_args_is_help=True)

# running: heart-beating instances; pending: asked for, not yet picked up by a generation worker
JOB_COLUMNS = ["id", "name", "status", "target_instances", "running_instances", "pending_instances", "progress",
               "tags", "created_at"]


def apply_override(spec: dict[str, Any], assignment: str) -> None:
    """`generation.instances=4` sets spec["generation"]["instances"] = 4 (the value is parsed as YAML)."""
    key, sep, value = assignment.partition("=")
    if not sep or not key.strip():
        raise CLIError(f"--set wants KEY=VALUE with a dotted key, e.g. generation.instances=4 (got {assignment!r})")
    *parents, leaf = key.strip().split(".")
    node = spec
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise CLIError(f"--set {key}: {part!r} is not a mapping in the spec")
        node = child
    try:
        node[leaf] = yaml.safe_load(value)
    except yaml.YAMLError:
        node[leaf] = value


def distill_overrides(teacher: str | None) -> list[str]:
    """`--teacher NAME` as --set assignments (before the user's own, which may refine them)."""
    return ["algorithm.name=distill", f"algorithm.teacher={teacher}"] if teacher else []


def load_spec(path: Path, name: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Read a YAML/JSON spec, apply `--set` overrides and validate it locally, so a typo is reported before anything
    is sent."""
    if not path.is_file():
        raise CLIError(f"no such file: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CLIError(f"{path} is not valid YAML/JSON: {exc}".replace("\n", " ")) from None
    if not isinstance(raw, dict):
        raise CLIError(f"{path} must hold a mapping of JobSpec fields (see contract/spec.py)")
    for assignment in overrides or []:
        apply_override(raw, assignment)
    if name:
        raw["name"] = name
    try:
        JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise CLIError(validation_message(exc, f"spec in {path}")) from None
    return raw


def _progress(job: dict[str, Any]) -> str:
    progress = job.get("progress") or {}
    if not progress:
        return "-"
    return f"{progress.get('iteration', 0)}/{progress.get('total_iterations', '?')}"


def _show_job(ctx: typer.Context, job: dict[str, Any], verb: str | None = None) -> None:
    if emit_json(ctx, job):
        return
    if verb:
        typer.echo(f"job {job.get('id')} {verb}: status {job.get('status')}")
        return
    fields = {k: v for k, v in job.items() if k not in ("spec", "latest_metrics", "progress")}
    fields["progress"] = _progress(job)
    print_fields(fields)
    if job.get("latest_metrics"):
        typer.echo("latest_metrics:")
        for key, value in sorted(job["latest_metrics"].items()):
            typer.echo(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")


@jobs_app.command("submit")
def submit(
    ctx: typer.Context,
    spec_file: Path = typer.Argument(..., help="JobSpec as YAML or JSON"),
    name: str | None = typer.Option(None, "--name", help="override the spec's name"),
    overrides: list[str] | None = typer.Option(None, "--set", help="KEY=VALUE, repeatable: generation.instances=4"),
    teacher: str | None = typer.Option(None, "--teacher", help="on-policy distillation from this registered model "
                                       "(sets algorithm.name=distill and algorithm.teacher; it must share the "
                                       "model's tokenizer)"),
    agent_url: str | None = typer.Option(None, "--agent-url", help="train your agent service: the platform POSTs "
                                         "each episode to URL/rollout (agent.url; a gateway job)"),
    agent_code: Path | None = typer.Option(None, "--agent-code", help="a Python file defining run(task, base_url, "
                                           "api_key), run per episode in the jail (agent.code)"),
    agent_requirements: list[str] | None = typer.Option(None, "--agent-requirement", help="a package for "
                                                        "--agent-code, repeatable: openai-agents==0.24.0"),
) -> None:
    """Submit a job; it starts `queued` and the controller admits it within the team's quotas."""
    spec = load_spec(spec_file, name, [*distill_overrides(teacher), *(overrides or [])])
    spec = with_agent(spec, agent_url, agent_code, agent_requirements)
    with client(ctx) as api:
        job = api.submit_job(spec)
    if not emit_json(ctx, job):
        typer.echo(f"submitted job {job.get('id')} {job.get('name')!r}: status {job.get('status')}")


@jobs_app.command("list")
def list_jobs(
    ctx: typer.Context,
    status: str | None = typer.Option(None, "--status",
                                      help="queued|starting|running|paused|parked|succeeded|failed|..."),
    name: str | None = typer.Option(None, "--name", help="filter by name"),
    tag: str | None = typer.Option(None, "--tag", help="only jobs carrying this tag"),
    search: str | None = typer.Option(None, "--search", "-q", help="text in the name, tags or notes (any case)"),
    limit: int = typer.Option(50, "--limit", min=1),
    offset: int = typer.Option(0, "--offset", min=0),
) -> None:
    """Jobs of the current team, newest first."""
    with client(ctx) as api:
        page = api.list_jobs(status=status, name=name, tag=tag, search=search, limit=limit, offset=offset)
    if emit_json(ctx, page):
        return
    rows = [{**job, "progress": _progress(job), "tags": ",".join(job.get("tags") or [])}
            for job in page.get("data", [])]
    print_table(rows, JOB_COLUMNS, empty="(no jobs)")
    if page.get("count", 0) > len(rows) + offset:
        typer.echo(f"... {page['count']} jobs in all (use --offset/--limit)")


@jobs_app.command("get")
def get(ctx: typer.Context, job_id: int, spec: bool = typer.Option(False, "--spec", help="print the spec too")) -> None:
    """One job: status, health and training signals, instances, progress, latest metrics."""
    with client(ctx) as api:
        job = api.get_job(job_id)
        health = api.job_health(job_id)
    if emit_json(ctx, {**job, "health": health}):
        return
    _show_job(ctx, job)
    _show_health(health)
    if spec:
        typer.echo("spec:")
        typer.echo(spec_yaml(job.get("spec") or {}).rstrip())


def _show_health(health: dict[str, Any]) -> None:
    typer.echo(f"health: {health.get('state')}: {health.get('summary')}")
    for signal in health.get("signals") or []:
        typer.echo(f"  {signal.get('severity')} {signal.get('check')}: {signal.get('message')}")


@jobs_app.command("cancel")
def cancel(ctx: typer.Context, job_id: int) -> None:
    """Cancel a queued, starting, running or paused job."""
    with client(ctx) as api:
        _show_job(ctx, api.cancel_job(job_id), "cancel requested")


@jobs_app.command("pause")
def pause(ctx: typer.Context, job_id: int) -> None:
    """Pause a running job (it keeps its state; resume continues it)."""
    with client(ctx) as api:
        _show_job(ctx, api.pause_job(job_id), "pause requested")


@jobs_app.command("resume")
def resume(ctx: typer.Context, job_id: int) -> None:
    """Resume a paused job."""
    with client(ctx) as api:
        _show_job(ctx, api.resume_job(job_id), "resumed")


@jobs_app.command("scale")
def scale(
    ctx: typer.Context,
    job_id: int,
    instances: int | None = typer.Argument(None, min=1, help="target generation instances"),
    auto: bool | None = typer.Option(None, "--auto/--manual", help="hand scaling to the autoscaler, or take it back"),
) -> None:
    """Set a job's target generation instances and/or switch autoscaling."""
    if instances is None and auto is None:
        raise CLIError("give a target instance count and/or --auto/--manual")
    with client(ctx) as api:
        job = api.scale_job(job_id, instances, autoscale=auto)
    if not emit_json(ctx, job):
        mode = "auto" if job.get("autoscale") else "manual"
        typer.echo(f"job {job.get('id')}: target {job.get('target_instances')} instances "
                   f"({job.get('running_instances')} running, {job.get('pending_instances', 0)} pending), "
                   f"scaling {mode}")


@jobs_app.command("logs")
def logs(
    ctx: typer.Context,
    job_id: int,
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing live events until the job ends"),
    metrics: bool = typer.Option(True, "--metrics/--no-metrics", help="with --follow: print iteration metrics"),
) -> None:
    """A job's event log; with --follow, live events (SSE) until it succeeds, fails or is cancelled."""
    with client(ctx) as api:
        if globals_of(ctx).as_json:
            emit_json(ctx, api.job_events(job_id).get("data", []))
            return
        if follow:
            follow_job(api, job_id, show_metrics=metrics)
        else:
            print_all_events(api, job_id, after_id=None)


@jobs_app.command("iterations")
def iterations(
    ctx: typer.Context,
    job_id: int,
    keys: str = typer.Option("reward_mean,samples_per_s,iteration_seconds,gen_seconds,train_seconds,instances",
                             "--keys", help="comma-separated metric keys to show"),
    limit: int = typer.Option(100, "--limit", min=1),
) -> None:
    """Per-iteration metrics of a job."""
    with client(ctx) as api:
        page = api.job_iterations(job_id, limit=limit)
    if emit_json(ctx, page):
        return
    columns = ["iteration", *[k.strip() for k in keys.split(",") if k.strip()]]
    rows = [{"iteration": it.get("iteration"), **(it.get("metrics") or {})} for it in page.get("data", [])]
    print_table(rows, columns, empty="(no iterations yet)")


@jobs_app.command("samples")
def samples(
    ctx: typer.Context,
    job_id: int,
    iteration: int | None = typer.Option(None, "--iteration", help="default: the latest samples"),
    limit: int = typer.Option(10, "--limit", min=1),
    min_reward: float | None = typer.Option(None, "--min-reward"),
    max_reward: float | None = typer.Option(None, "--max-reward"),
    max_length: int | None = typer.Option(None, "--max-length"),
    policy_version: int | None = typer.Option(None, "--policy-version"),
    min_staleness: int | None = typer.Option(None, "--min-staleness", help="versions behind the trainer"),
    min_mismatch: float | None = typer.Option(None, "--min-mismatch", help="the sample's mean k3 mismatch"),
    tokens: str | None = typer.Option(None, "--tokens", help="a sample id: its per-token record instead"),
) -> None:
    """Generated samples of a job: prompt, response, reward, length, policy version, instance, mismatch; filtered
    like the dashboard's trajectory explorer; `--tokens SAMPLE_ID`: one sample token by token (behaviour and
    trainer logprob, their difference, version, loss mask)."""
    if tokens is not None:
        sample_token_table(ctx, job_id, tokens)
        return
    with client(ctx) as api:
        page = api.job_samples(job_id, iteration=iteration, limit=limit, min_reward=min_reward, max_reward=max_reward,
                               max_length=max_length, policy_version=policy_version, min_staleness=min_staleness,
                               min_mismatch=min_mismatch)
    if emit_json(ctx, page):
        return
    for sample in page.get("data", []):
        mismatch = "" if sample.get("mismatch") is None else f"  mismatch={sample['mismatch']:.2e}"
        typer.echo(f"--- {sample.get('sample_id')}  reward={sample.get('reward')}  length={sample.get('length')}  "
                   f"v{sample.get('policy_version')}  {sample.get('instance_id')}{mismatch}")
        typer.echo(f"prompt:   {sample.get('prompt')!r}")
        typer.echo(f"response: {sample.get('response')!r}")
    if not page.get("data"):
        typer.echo("(no samples yet)")


def sample_token_table(ctx: typer.Context, job_id: int, sample_id: str) -> None:
    with client(ctx) as api:
        record = api.sample_tokens(job_id, sample_id)
    if emit_json(ctx, record):
        return
    typer.echo(f"{sample_id}: reward={record['reward']} advantage={record['advantage']} trained at "
               f"v{record['trained_version']} mismatch={record.get('mismatch')}")
    marks, mask = record["versions"], record.get("loss_mask")
    rows = [{"#": i, "token": repr(piece), "behaviour": f"{b:.4f}", "current": f"{c:.4f}", "delta": f"{c - b:+.4f}",
             "version": [v for start, v in marks if start <= i][-1],  # the last mark at or before token i
             "loss": "trained" if mask is None or mask[i] else "context"}
            for i, (piece, b, c) in enumerate(zip(record["pieces"], record["behaviour"], record["current"],
                                                  strict=True))]
    print_table(rows, ["#", "token", "behaviour", "current", "delta", "version", "loss"], empty="(no tokens)")


@jobs_app.command("checkpoints")
def checkpoints(ctx: typer.Context, job_id: int) -> None:
    """Checkpoints a job wrote (Hugging Face safetensors directories in the artifact store)."""
    with client(ctx) as api:
        page = api.job_checkpoints(job_id)
    if not emit_json(ctx, page):
        print_table(page.get("data", []), ["iteration", "path", "created_at"], empty="(no checkpoints yet)")


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")
