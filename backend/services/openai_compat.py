"""OpenAI's fine-tuning API mapped onto the platform's own datasets and jobs (routes in
backend/api/routes/openai_compat.py; the mapping is documented in docs/openai.md).

- A file (`file-<n>`) is the team's dataset n: uploads are validated row by row like every dataset upload.
- A fine-tuning job (`ftjob-<n>`) is platform job n, created from a JobSpec this module builds from the request (the
  grader becomes `reward`, the hyperparameters `training` / `algorithm` / `dataset` fields). The request's OpenAI
  facts (grader, resolved hyperparameters, suffix, metadata) are kept in the job's `openai` event, which also marks
  the jobs this API lists: a job submitted through /api/v1 is not a fine-tuning job here.
- Events (`ftevent-<n>`) and checkpoints (`ftckpt-<n>`) are the job's event and checkpoint rows.
Lists are newest first with OpenAI's cursor (`after` = the last id of the previous page) and `has_more`.
"""

from __future__ import annotations

import ast
import math
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import TERMINAL_JOB_STATUSES, JobStatus
from backend.db.models import Checkpoint, Dataset, Iteration, Job, JobEvent, Team, User
from backend.schemas.openai_compat import FineTuningJobCreate, ReinforcementHyperparameters
from backend.services import jobs as job_service
from backend.services.datasets import require_ready
from backend.services.errors import Conflict, InvalidInput, ServiceError
from contract.rewards import validate_reward_spec
from contract.spec import MAX_SEED, AlgorithmSpec, DatasetSpec, JobSpec, TrainingSpec

FILE, JOB, EVENT, CHECKPOINT = "file-", "ftjob-", "ftevent-", "ftckpt-"
MARKER = "openai"  # kind of the event that records a job's OpenAI request (and marks it as a fine-tuning job)
TAG = "openai"  # on every job created here, so the dashboard can filter them
GRADER = "method.reinforcement.grader"
HYPER = "method.reinforcement.hyperparameters"
DEFAULT_LR = float(TrainingSpec.model_fields["lr"].default)
DEFAULT_GROUP = int(AlgorithmSpec.model_fields["group_size"].default)
DEFAULT_BATCH = int(TrainingSpec.model_fields["prompts_per_iteration"].default)
DEFAULT_EVAL_EVERY = int(TrainingSpec.model_fields["eval_every"].default)
DEFAULT_EVAL_ROWS = int(DatasetSpec.model_fields["eval_prompts"].default)
STATUSES = {JobStatus.queued: "queued", JobStatus.starting: "queued", JobStatus.running: "running",
            JobStatus.paused: "paused", JobStatus.succeeded: "succeeded", JobStatus.failed: "failed",
            JobStatus.cancelled: "cancelled"}
TEXT_GRADERS = ("string_check", "text_similarity", "multi")
SCORE_MODEL_FIELDS = ("name", "model", "input", "range", "pass_threshold")  # -> the `judge` reward's params
# platform_spec may not set what the OpenAI parameters set (so the job object reports what the job runs)
MAPPED = {("name",): "suffix", ("model",): "model", ("reward",): GRADER,
          ("seed",): "seed", ("training", "iterations"): f"{HYPER}.n_epochs",
          ("training", "prompts_per_iteration"): f"{HYPER}.batch_size",
          ("training", "lr"): f"{HYPER}.learning_rate_multiplier",
          ("training", "eval_every"): f"{HYPER}.eval_interval",
          ("algorithm", "group_size"): f"{HYPER}.compute_multiplier"}
DATASET_EXTRAS = ("system_prompt",)  # the one dataset field platform_spec may set
PYTHON_SHIM = '''

def reward(prompt, response, meta):  # the platform's entry point, calling OpenAI's grade(sample, item)
    import json as _json
    try:
        _parsed = _json.loads(response)
    except ValueError:
        _parsed = None
    return float(grade({"output_text": response, "output_json": _parsed, "output_tools": [], "choices": []}, meta))
'''
_SLUG = re.compile(r"[^A-Za-z0-9_.\-]+")


class OpenAIError(ServiceError):
    """400 (unless told) naming the request parameter (`param`) and a machine-readable `code`."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status_code: int = 400):
        super().__init__(message)
        self.param, self.code, self.status_code = param, code, status_code


# -- ids and times ----------------------------------------------------------------------------------------------------
def parse_id(prefix: str, raw: str, what: str, param: str | None = None) -> int:
    """The number of `<prefix><n>`; 404 for anything else (as for an object of another team)."""
    number = raw.removeprefix(prefix) if raw.startswith(prefix) else ""
    if not number.isdigit() or len(number) > 10 or not 1 <= int(number) <= 2**31 - 1:
        raise OpenAIError(f"No such {what}: {raw[:100]!r}", param=param, code="not_found", status_code=404)
    return int(number)


def unix(moment: datetime | None) -> int | None:
    if moment is None:
        return None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


def _slug(text: str) -> str:
    return _SLUG.sub("-", text).strip("-")[:64] or "x"


def page(items: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """OpenAI's list object; the caller fetched `limit + 1` rows to know `has_more`."""
    return {"object": "list", "data": items[:limit], "has_more": len(items) > limit,
            "first_id": items[0]["id"] if items else None, "last_id": items[:limit][-1]["id"] if items else None}


# -- files ------------------------------------------------------------------------------------------------------------
def file_object(dataset: Dataset) -> dict[str, Any]:
    status = {"ready": "processed", "failed": "error"}.get(dataset.state, "uploaded")
    return {"id": f"{FILE}{dataset.id}", "object": "file", "bytes": dataset.size_bytes,
            "created_at": unix(dataset.created_at), "filename": dataset.name, "purpose": "fine-tune",
            "status": status, "status_details": dataset.error if dataset.state == "failed" else None,
            "expires_at": None}


def get_file(session: Session, team: Team, raw_id: str, param: str | None = None) -> Dataset:
    dataset_id = parse_id(FILE, raw_id, "File", param)
    dataset = session.scalar(select(Dataset).where(Dataset.id == dataset_id, Dataset.team_id == team.id))
    if dataset is None:
        raise OpenAIError(f"No such File object: {raw_id}", param=param, code="not_found", status_code=404)
    return dataset


def list_files(session: Session, team: Team, *, after: str | None, limit: int, ascending: bool) -> dict[str, Any]:
    query = select(Dataset).where(Dataset.team_id == team.id)
    if after is not None:
        cursor = parse_id(FILE, after, "File", "after")
        query = query.where(Dataset.id > cursor if ascending else Dataset.id < cursor)
    order = Dataset.id.asc() if ascending else Dataset.id.desc()
    rows = session.scalars(query.order_by(order).limit(limit + 1))
    return page([file_object(row) for row in rows], limit)


def delete_file(session: Session, team: Team, dataset: Dataset) -> Path | None:
    """Delete the dataset row (the caller removes the returned file after committing); 409 while a job of the team
    that has not finished reads it, or while a Hub import is still writing it."""
    if dataset.state == "downloading":
        raise Conflict(f"file {FILE}{dataset.id} is still being imported; delete it once it is ready or failed")
    unfinished = session.scalars(select(Job).where(Job.team_id == team.id,
                                                   Job.status.not_in([s.value for s in TERMINAL_JOB_STATUSES])))
    users = [job.id for job in unfinished if (job.spec.get("dataset") or {}).get("id") == dataset.id]
    if users:
        raise Conflict(f"file {FILE}{dataset.id} is the training file of unfinished jobs "
                       f"{', '.join(JOB + str(i) for i in users)}: cancel them or wait until they finish")
    path = Path(dataset.storage_path) if dataset.storage_path else None
    session.delete(dataset)
    session.flush()
    return path


# -- graders ----------------------------------------------------------------------------------------------------------
def _python_reward(grader: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's python grader (`def grade(sample, item) -> float`) as the platform's sandboxed python reward."""
    unknown = sorted(set(grader) - {"type", "name", "source", "image_tag"})
    if unknown:
        raise OpenAIError(f"python grader: unknown fields {unknown}", param=GRADER)
    if grader.get("image_tag") is not None:
        raise OpenAIError("python grader: image_tag is not supported (graders run in the platform's sandbox, with the "
                          "packages its workers have)", param=f"{GRADER}.image_tag")
    source = grader.get("source")
    if not isinstance(source, str) or not source.strip():
        raise OpenAIError("python grader: source must be Python code defining grade(sample, item)",
                          param=f"{GRADER}.source")
    try:
        names = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    except (SyntaxError, ValueError) as exc:
        raise OpenAIError(f"python grader: source does not compile: {exc}", param=f"{GRADER}.source") from None
    if "grade" not in names:
        raise OpenAIError("python grader: source defines no top-level function grade(sample, item)",
                          param=f"{GRADER}.source")
    if "reward" in names:
        raise OpenAIError("python grader: rename the top-level function `reward` (the platform's sandbox calls a "
                          "function of that name)", param=f"{GRADER}.source")
    return {"type": "python", "code": source + PYTHON_SHIM}


def _judge_fields(grader: dict[str, Any], where: str) -> dict[str, Any]:
    """OpenAI's score_model grader as the `judge` reward's fields: `model` names a model registered in the team."""
    if grader.get("sampling_params"):
        raise OpenAIError("score_model grader: sampling_params are not supported (the judge decodes greedily)",
                          param=f"{where}.sampling_params", code="unsupported_grader")
    unknown = sorted(set(grader) - {"type", "sampling_params", *SCORE_MODEL_FIELDS})
    if unknown:
        raise OpenAIError(f"score_model grader: unknown fields {unknown}", param=where)
    return {key: value for key, value in grader.items() if key in SCORE_MODEL_FIELDS}


def _sub_graders(graders: Any) -> Any:
    """multi's sub-graders with score_model as the platform's `judge`."""
    if not isinstance(graders, dict):
        return graders
    return {name: {"type": "judge", **_judge_fields(sub, f"{GRADER}.graders.{name}")}
            if isinstance(sub, dict) and sub.get("type") == "score_model" else sub for name, sub in graders.items()}


def reward_of(grader: dict[str, Any]) -> dict[str, Any]:
    """The platform RewardSpec (as JSON) of an OpenAI grader object, validated; OpenAIError naming the problem."""
    kind = grader.get("type")
    supported = [*TEXT_GRADERS, "score_model", "python"]
    if kind == "label_model":
        raise OpenAIError(f"grader type 'label_model' is not supported; use one of {supported}",
                          param=f"{GRADER}.type", code="unsupported_grader")
    if kind == "python":
        reward = _python_reward(grader)
    elif kind == "score_model":
        reward = {"type": "judge", "params": _judge_fields(grader, GRADER)}
    elif kind in TEXT_GRADERS:
        params = {key: value for key, value in grader.items() if key != "type"}
        if kind == "multi":
            params["graders"] = _sub_graders(params.get("graders"))
        reward = {"type": kind, "params": params}
    else:
        raise OpenAIError(f"grader type {kind!r} is not one of {supported}", param=f"{GRADER}.type")
    try:
        validate_reward_spec(reward)
    except ValueError as exc:
        raise OpenAIError(f"invalid grader: {_first_error(exc)}", param=GRADER) from None
    return reward


def _first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}" if where else str(error["msg"])
    return str(exc)


# -- jobs -------------------------------------------------------------------------------------------------------------
def _refuse_other_methods(body: FineTuningJobCreate) -> None:
    method = body.method
    kind = method.type if method is not None else "supervised"
    if kind in ("supervised", "dpo"):
        label = {"supervised": "supervised fine-tuning (SFT)", "dpo": "DPO"}[kind]
        default = "" if method is not None else " (a job without `method` is supervised)"
        raise OpenAIError(f"method {kind!r} is not supported{default}: this platform runs reinforcement fine-tuning "
                          f"only and has no {label} runtime; send method={{\"type\": \"reinforcement\", "
                          f"\"reinforcement\": {{\"grader\": ...}}}}", param="method.type", code="unsupported_method")
    if method is None or method.reinforcement is None:
        raise OpenAIError("method.reinforcement (with a grader) is required for method type 'reinforcement'",
                          param="method.reinforcement")
    if body.hyperparameters is not None:
        raise OpenAIError("top-level hyperparameters are for supervised jobs: give them in "
                          "method.reinforcement.hyperparameters", param="hyperparameters")
    if body.validation_file is not None:
        raise OpenAIError("validation_file is not supported: the platform holds out the last `eval_samples` rows "
                          f"of the training file for evaluation ({HYPER}.eval_samples)", param="validation_file",
                          code="unsupported_parameter")
    if body.integrations:
        raise OpenAIError("integrations are not supported here: connect a tracker to the team (PUT "
                          "/api/v1/trackers/wandb) and name it in platform_spec.telemetry", param="integrations",
                          code="unsupported_parameter")


def _hyperparameters(hp: ReinforcementHyperparameters, rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(JobSpec fields, the resolved OpenAI hyperparameters) for a training file of `rows` rows."""
    if hp.reasoning_effort not in (None, "default"):
        raise OpenAIError("reasoning_effort is not supported (the platform's models have no reasoning-effort "
                          "setting); leave it unset or 'default'", param=f"{HYPER}.reasoning_effort",
                          code="unsupported_parameter")
    eval_rows = DEFAULT_EVAL_ROWS if hp.eval_samples in (None, "auto") else int(hp.eval_samples)
    if hp.eval_samples not in (None, "auto") and eval_rows >= rows:
        raise OpenAIError(f"eval_samples {eval_rows} leaves no training rows: the training file has {rows}",
                          param=f"{HYPER}.eval_samples")
    held_out = eval_rows if rows > eval_rows else 0  # the runtime's rule (workers/datasets/__init__.py)
    train_rows = rows - held_out
    batch = min(DEFAULT_BATCH, train_rows) if hp.batch_size in (None, "auto") else int(hp.batch_size)
    epochs = 1 if hp.n_epochs in (None, "auto") else int(hp.n_epochs)
    lr_mult = 1.0 if hp.learning_rate_multiplier in (None, "auto") else float(hp.learning_rate_multiplier)
    compute = 1.0 if hp.compute_multiplier in (None, "auto") else float(hp.compute_multiplier)
    every = DEFAULT_EVAL_EVERY if hp.eval_interval in (None, "auto") else int(hp.eval_interval)
    iterations = max(1, math.ceil(epochs * train_rows / batch))
    group = max(1, round(compute * DEFAULT_GROUP))
    if DEFAULT_LR * lr_mult > 1:
        raise OpenAIError(f"learning_rate_multiplier {lr_mult:g} gives a learning rate above 1 (the platform's "
                          f"default is {DEFAULT_LR:g})", param=f"{HYPER}.learning_rate_multiplier")
    if group > 1024 or iterations > 1_000_000:
        bad = "compute_multiplier" if group > 1024 else "n_epochs"
        raise OpenAIError(f"{bad} is too large for the platform's limits (1024 samples per prompt, 1,000,000 "
                          "iterations)", param=f"{HYPER}.{bad}")
    fields = {"training": {"iterations": iterations, "prompts_per_iteration": batch, "lr": DEFAULT_LR * lr_mult,
                           "eval_every": every if held_out else 0},
              "algorithm": {"group_size": group}, "dataset": {"eval_prompts": held_out}}
    resolved = {"batch_size": batch, "n_epochs": epochs, "learning_rate_multiplier": lr_mult,
                "compute_multiplier": compute, "eval_interval": every, "eval_samples": held_out,
                "reasoning_effort": "default"}
    return fields, resolved


def _merge(base: dict[str, Any], extra: dict[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        where = (*path, key)
        if where in MAPPED:
            raise OpenAIError(f"platform_spec.{'.'.join(where)} is set by {MAPPED[where]}", param=f"platform_spec."
                              f"{'.'.join(where)}")
        if where[:1] == ("dataset",) and len(where) == 2 and key not in DATASET_EXTRAS:
            raise OpenAIError(f"platform_spec.dataset may set only {list(DATASET_EXTRAS)}; the rows come from "
                              "training_file", param=f"platform_spec.{'.'.join(where)}")
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, where)
        else:
            out[key] = value
    return out


def build_spec(body: FineTuningJobCreate, dataset: Dataset) -> tuple[JobSpec, dict[str, Any]]:
    """The JobSpec of a reinforcement request on `dataset`, and the facts to keep (the `openai` event's data)."""
    _refuse_other_methods(body)
    assert body.method is not None and body.method.reinforcement is not None
    rft = body.method.reinforcement
    reward = reward_of(rft.grader)
    fields, resolved = _hyperparameters(rft.hyperparameters or ReinforcementHyperparameters(), dataset.row_count)
    seed = body.seed if body.seed is not None else secrets.randbelow(MAX_SEED + 1)
    spec: dict[str, Any] = {"name": body.suffix or f"ft-{body.model}"[:200], "model": body.model, "seed": seed,
                            "dataset": {"id": dataset.id, **fields["dataset"]}, "reward": reward,
                            "training": fields["training"], "algorithm": fields["algorithm"]}
    extra = body.platform_spec or {}
    if "dataset" in extra and not isinstance(extra["dataset"], dict):
        raise OpenAIError("platform_spec.dataset must be an object", param="platform_spec.dataset")
    spec = _merge(spec, extra)
    try:
        job_spec = JobSpec.model_validate(spec)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise OpenAIError(f"platform_spec.{where}: {error['msg']}" if where else str(error["msg"]),
                          param=f"platform_spec.{where}" if where else "platform_spec") from None
    facts = {"training_file": f"{FILE}{dataset.id}", "suffix": body.suffix, "seed": seed,
             "metadata": body.metadata, "grader": rft.grader, "hyperparameters": resolved,
             "platform_spec": extra or None}
    return job_spec, facts


PARAMS = {("body", "model"): "model", ("body", "tokenizer"): "platform_spec.tokenizer",
          ("body", "dataset", "id"): "training_file", ("body", "reward"): GRADER}


def create_job(session: Session, team: Team, user: User, body: FineTuningJobCreate) -> tuple[Job, JobEvent]:
    """A queued platform job for an OpenAI request (400 naming the parameter; 404 for a file of no job's team)."""
    dataset = get_file(session, team, body.training_file, "training_file")
    try:
        require_ready(dataset, ("training_file",))
    except InvalidInput as exc:
        raise OpenAIError(exc.detail, param="training_file") from None
    spec, facts = build_spec(body, dataset)
    try:
        job = job_service.create_job(session=session, team=team, user=user, spec=spec)
    except InvalidInput as exc:
        param = PARAMS.get(tuple(str(part) for part in exc.loc), ".".join(str(p) for p in exc.loc[1:]) or None)
        if exc.loc[:2] == ("body", "reward") and len(exc.loc) > 2:  # a judge's model: the grader's own field path
            param = ".".join([GRADER, *(str(part) for part in exc.loc[2:] if part != "params")])
        raise OpenAIError(exc.detail, param=param) from None
    job.tags = [*job.tags, TAG]
    marker = job_service.record_event(session=session, job_id=job.id, kind=MARKER,
                                      message="created through the OpenAI-compatible API (/openai/v1)", data=facts)
    return job, marker


def get_job(session: Session, team: Team, raw_id: str) -> tuple[Job, JobEvent]:
    job_id = parse_id(JOB, raw_id, "fine-tuning job")
    row = session.execute(select(Job, JobEvent).join(JobEvent, JobEvent.job_id == Job.id)
                          .where(Job.id == job_id, Job.team_id == team.id, JobEvent.kind == MARKER)).first()
    if row is None:
        raise OpenAIError(f"No such fine-tuning job: {raw_id}", code="not_found", status_code=404)
    return row[0], row[1]


def list_jobs(session: Session, team: Team, *, after: str | None, limit: int) -> dict[str, Any]:
    query = (select(Job, JobEvent).join(JobEvent, JobEvent.job_id == Job.id)
             .where(Job.team_id == team.id, JobEvent.kind == MARKER))
    if after is not None:
        query = query.where(Job.id < parse_id(JOB, after, "fine-tuning job", "after"))
    rows = session.execute(query.order_by(Job.id.desc()).limit(limit + 1)).all()
    tokens = _trained_tokens(session, [job.id for job, _ in rows if job.status in TERMINAL_JOB_STATUSES])
    return page([job_object(job, marker, team, tokens.get(job.id)) for job, marker in rows], limit)


def _trained_tokens(session: Session, job_ids: Sequence[int]) -> dict[int, int]:
    """Response tokens the jobs trained on: per iteration, tokens_per_s x iteration_seconds (workers/runtime/metrics.py
    measures tokens_per_s as the iteration's sample tokens over its seconds)."""
    totals = dict.fromkeys(job_ids, 0.0)
    if not job_ids:
        return {}
    for job_id, metrics in session.execute(select(Iteration.job_id, Iteration.metrics)
                                           .where(Iteration.job_id.in_(job_ids))):
        rate, seconds = metrics.get("tokens_per_s"), metrics.get("iteration_seconds")
        if isinstance(rate, int | float) and isinstance(seconds, int | float):
            totals[job_id] += rate * max(seconds, 1e-9)
    return {job_id: round(total) for job_id, total in totals.items()}


def trained_tokens(session: Session, job: Job) -> int | None:
    return _trained_tokens(session, [job.id]).get(job.id) if job.status in TERMINAL_JOB_STATUSES else None


def model_name(job: Job, team: Team, facts: dict[str, Any]) -> str:
    base, owner = _slug(str(job.spec.get("model", ""))), _slug(team.name)
    return f"ft:{base}:{owner}:{_slug(facts.get('suffix') or job.name)}:{job.id}"


def job_object(job: Job, marker: JobEvent, team: Team, tokens: int | None) -> dict[str, Any]:
    facts = marker.data or {}
    resolved = facts.get("hyperparameters") or {}
    status = STATUSES[JobStatus(job.status)]
    error = None
    if job.status == JobStatus.failed:
        error = {"code": "job_failed", "message": job.error or "the job failed", "param": None}
    return {
        "id": f"{JOB}{job.id}", "object": "fine_tuning.job", "created_at": unix(job.created_at),
        "finished_at": unix(job.finished_at) if job.status in TERMINAL_JOB_STATUSES else None,
        "model": job.spec.get("model"), "organization_id": f"org-{team.id}",
        "fine_tuned_model": model_name(job, team, facts) if job.status == JobStatus.succeeded else None,
        "status": status, "error": error, "seed": facts.get("seed", job.spec.get("seed", 0)),
        "training_file": facts.get("training_file"), "validation_file": None, "result_files": [],
        "trained_tokens": tokens, "estimated_finish": None, "integrations": None,
        "metadata": facts.get("metadata"), "suffix": facts.get("suffix"),
        "hyperparameters": {key: resolved.get(key) for key in ("batch_size", "learning_rate_multiplier", "n_epochs")},
        "method": {"type": "reinforcement",
                   "reinforcement": {"grader": facts.get("grader"), "hyperparameters": resolved}},
        "platform_job_id": job.id, "platform_status": str(job.status),
    }


def require_fine_tunable(job: Job, action: str) -> None:
    """OpenAI pauses running jobs and resumes paused ones: other moves are 409 naming the status."""
    allowed = {"pause": (JobStatus.running,), "resume": (JobStatus.paused, JobStatus.failed)}[action]
    if job.status not in allowed:
        raise OpenAIError(f"fine-tuning job {JOB}{job.id} is {STATUSES[JobStatus(job.status)]} (platform status "
                          f"{job.status}): it cannot be {action}d", code="invalid_state", status_code=409)


# -- events and checkpoints -------------------------------------------------------------------------------------------
WARN_KINDS = ("stalled", "training_signal", "checkpoint", "tracker", "worker")


def _level(event: JobEvent) -> str:
    to = (event.data or {}).get("to") if event.kind == "status" else None
    if to == JobStatus.failed:
        return "error"
    return "warn" if event.kind in WARN_KINDS else "info"


def list_events(session: Session, job: Job, *, after: str | None, limit: int) -> dict[str, Any]:
    query = select(JobEvent).where(JobEvent.job_id == job.id)
    if after is not None:
        query = query.where(JobEvent.id < parse_id(EVENT, after, "fine-tuning job event", "after"))
    rows = session.scalars(query.order_by(JobEvent.id.desc()).limit(limit + 1))
    return page([{"id": f"{EVENT}{event.id}", "object": "fine_tuning.job.event", "created_at": unix(event.created_at),
                  "level": _level(event), "message": event.message, "type": "message",
                  "data": {"kind": event.kind, **(event.data or {})}} for event in rows], limit)


def list_checkpoints(session: Session, job: Job, marker: JobEvent, team: Team, *, after: str | None,
                     limit: int) -> dict[str, Any]:
    query = select(Checkpoint).where(Checkpoint.job_id == job.id)
    if after is not None:
        query = query.where(Checkpoint.id < parse_id(CHECKPOINT, after, "fine-tuning checkpoint", "after"))
    rows = list(session.scalars(query.order_by(Checkpoint.id.desc()).limit(limit + 1)))
    found = session.execute(select(Iteration.iteration, Iteration.metrics).where(
        Iteration.job_id == job.id, Iteration.iteration.in_([row.iteration for row in rows])))
    metrics: dict[int, dict[str, Any]] = {iteration: values for iteration, values in found}
    name = model_name(job, team, marker.data or {})
    return page([{"id": f"{CHECKPOINT}{row.id}", "object": "fine_tuning.job.checkpoint",
                  "created_at": unix(row.created_at), "fine_tuning_job_id": f"{JOB}{job.id}",
                  "fine_tuned_model_checkpoint": f"{name}:ckpt-step-{row.iteration}", "step_number": row.iteration,
                  "metrics": _checkpoint_metrics(row.iteration, metrics.get(row.iteration) or {}),
                  "platform_path": row.path} for row in rows], limit)


def _checkpoint_metrics(step: int, metrics: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's checkpoint metrics (`step`, `train_loss`), plus the platform's reward metrics of that iteration."""
    out: dict[str, Any] = {"step": float(step), "train_loss": metrics.get("loss"), "valid_loss": None,
                           "full_valid_loss": None, "train_mean_token_accuracy": None,
                           "valid_mean_token_accuracy": None, "full_valid_mean_token_accuracy": None}
    for key in ("reward_mean", "reward_std", "eval_reward", "kl", "entropy"):
        value = metrics.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            out[key] = value
    return out
