"""Evaluations (docs/user-guide.md#evaluation-suites): one suite run on one model, by the runtime's runner on the
generation pool (`generation.run_evaluation`, workers/runtime/evaluation.py).

- On demand: `create(session, client, team, model=..., suite=...)` or `(job_id=..., checkpoint=..., suite=...)`: the
  model is a registered model of the team (a baseline) or a checkpoint of one of the team's jobs (`job:<id>@...`);
  the suite is an inline EvalSuiteSpec, or the name of one of the job's suites. Another team's job: 404.
- Periodic: the job's driver asks for its suites on a checkpoint (`request_for_checkpoint`, through the reporter).
- Scheduling: a runner holds one generation slot, so it is sent only once its generation lease is granted
  (backend/services/generation_leases.py: a free slot and the team's max_generation_instances, counted by the
  scheduler beside the jobs' instances, which are never paused for it); until then it stays `queued` and the
  controller's pass sends it when a slot frees up (`dispatch_waiting`). The runner releases the lease when it ends.
- Results: the evaluation row (summary + per-row outputs and scores); a job checkpoint's `scores[suite]` gets the
  summary and, with `checkpoint.select: best`, the job's best checkpoint is marked (`best: true`).
"""

from __future__ import annotations

import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from backend.db.models import Checkpoint, Dataset, Evaluation, Job, Model, Team, UsageRecord
from backend.db.session import session_scope
from backend.services import generation_leases, model_aliases
from backend.services.errors import InvalidInput, NotFound, not_found
from backend.services.inference import redis_url_of
from contract import keys, tasks
from contract.evaluation import EvaluationStore, EvaluationTask, best_of, metric_value, retained
from contract.rewards import validate_reward_spec
from contract.spec import EvalSuiteSpec, JobSpec

ACTIVE = ("queued", "running")
_apps: dict[str, Any] = {}
_apps_lock = threading.Lock()


LEASE_S = 3600.0  # an evaluation's lease lasts this long unless released (a runner that died gives its slot back)


def lease_id(evaluation_id: int) -> str:
    return f"eval:{evaluation_id}"


def dispatch(session: Session, client: redis.Redis, row: Evaluation) -> bool:
    """Send the runner's task once a generation lease is granted (after the row is committed: the task reads it);
    False: it waits, queued, for the controller's next pass."""
    if client.exists(keys.evaluation_sent(row.id)):
        return True
    grant = generation_leases.try_acquire(session, client, team_id=row.team_id, lease=lease_id(row.id),
                                          kind="evaluation", ttl_s=LEASE_S)
    if not grant.granted:
        return False
    if client.set(keys.evaluation_sent(row.id), "1", nx=True, ex=int(2 * LEASE_S)):
        send(client, row.id)
    return True


def dispatch_waiting(session: Session, client: redis.Redis) -> list[int]:
    """The controller's pass: queued evaluations not sent yet, oldest first, each sent if its lease is granted."""
    sent = []
    for row in session.scalars(select(Evaluation).where(Evaluation.status == "queued").order_by(Evaluation.id)
                               .limit(200)):
        if not client.exists(keys.evaluation_sent(row.id)) and dispatch(session, client, row):
            sent.append(row.id)
    return sent


def send(client: redis.Redis, evaluation_id: int) -> None:
    """Queue the runner's task on the generation pool (after the row is committed: the task reads it)."""
    url = redis_url_of(client)
    with _apps_lock:
        if url not in _apps:
            _apps[url] = tasks.make_celery(url)
        app = _apps[url]
    app.send_task(tasks.RUN_EVALUATION, args=[evaluation_id])


def _suite(raw: Any, job_spec: JobSpec | None) -> EvalSuiteSpec:
    """An inline suite, or the name of one of the job's suites; a suite without a scorer takes the job's reward."""
    if isinstance(raw, str):
        found = next((s for s in (job_spec.evaluation if job_spec else []) if s.name == raw), None)
        if found is None:
            names = [s.name for s in job_spec.evaluation] if job_spec else []
            raise InvalidInput(f"no suite named {raw!r} (the job's suites: {names or 'none'}; or give a suite object)",
                               loc=("body", "suite"))
        suite = found
    else:
        try:
            suite = EvalSuiteSpec.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise InvalidInput(error["msg"], loc=("body", "suite", *error["loc"])) from None
    if suite.scorer is None:
        grading = job_spec.grading if job_spec is not None else None
        if grading is None:
            raise InvalidInput("give the suite a reward or a grader", loc=("body", "suite", "reward"))
        suite = suite.model_copy(update={"reward": grading[0]})
    scorer = suite.scorer
    assert scorer is not None  # filled from the job's reward above
    try:
        validate_reward_spec(scorer)
    except ValueError as err:
        raise InvalidInput(str(err), loc=("body", "suite", "grader" if suite.grader else "reward")) from err
    return suite


def check_suites(session: Session, team_id: int, spec: JobSpec) -> None:
    """At submit: each of the job's suites scores with a valid reward and reads a dataset of the team (422 naming
    `evaluation[i]...`)."""
    for index, suite in enumerate(spec.evaluation):
        place: tuple[str | int, ...] = ("body", "evaluation", index)
        try:
            _dataset_path(session, team_id, suite)
            _suite(suite.model_dump(mode="json"), spec)
        except InvalidInput as err:
            raise InvalidInput(err.detail, loc=(*place, *err.loc[2:])) from None


def _dataset_path(session: Session, team_id: int, suite: EvalSuiteSpec) -> str | None:
    if suite.dataset.path is not None:
        raise InvalidInput("dataset.path is for train-local runs: upload the dataset and give its id",
                           loc=("body", "suite", "dataset", "path"))
    if suite.dataset.id is None:
        return None
    dataset = session.get(Dataset, suite.dataset.id)
    if dataset is None or dataset.team_id != team_id:
        raise InvalidInput(f"dataset {suite.dataset.id} not found", loc=("body", "suite", "dataset", "id"))
    return str(dataset.storage_path)


def _target(session: Session, team: Team, model: str | None, job_id: int | None,
            checkpoint: str | int | None) -> tuple[str, str, Job | None, int | None]:
    """(label, model directory, job, iteration) of what to evaluate; 404 for anything not the team's."""
    if (model is None) == (job_id is None):
        raise InvalidInput("give model, or job_id (with checkpoint)", loc=("body", "model"))
    if job_id is not None:
        model = f"job:{job_id}@{checkpoint if checkpoint is not None else 'last'}"
    assert model is not None
    if model_aliases.is_alias(model):
        found = model_aliases.resolve_alias(session, team, model)
        if found is None:
            raise NotFound(f"model {model} not found (no such job of this team, or no such checkpoint on disk)")
        job, row = found
        return model, row.path, job, row.iteration
    registered = session.scalar(select(Model).where(Model.team_id == team.id, Model.name == model,
                                                    Model.state == "ready").order_by(Model.version.desc()).limit(1))
    if registered is None:
        raise not_found("model", model)
    return model, registered.path, None, None


def create(session: Session, client: redis.Redis, team: Team, *, suite: Any, model: str | None = None,
           job_id: int | None = None, checkpoint: str | int | None = None) -> Evaluation:
    label, model_dir, job, iteration = _target(session, team, model, job_id, checkpoint)
    spec = JobSpec.model_validate(job.spec) if job is not None else None
    resolved = _suite(suite, spec)
    row = _row(session, team.id, resolved, label=label, model_dir=model_dir, job=job, iteration=iteration, spec=spec)
    session.commit()
    dispatch(session, client, row)
    return row


def _row(session: Session, team_id: int, suite: EvalSuiteSpec, *, label: str, model_dir: str, job: Job | None,
         iteration: int | None, spec: JobSpec | None) -> Evaluation:
    row = Evaluation(team_id=team_id, job_id=job.id if job else None, iteration=iteration, model=label,
                     model_dir=model_dir, suite_name=suite.name, suite=suite.model_dump(mode="json"),
                     dataset_path=_dataset_path(session, team_id, suite), seed=spec.seed if spec else 0,
                     generation=spec.generation.model_dump(mode="json") if spec else None, status="queued")
    session.add(row)
    session.flush()
    return row


def request_for_checkpoint(client: redis.Redis, job_id: int, iteration: int, path: str) -> list[int]:
    """The job's suites on its checkpoint `iteration` (the driver, at an evaluation point); the new ids."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            return []
        spec = JobSpec.model_validate(job.spec)
        rows = [_row(session, job.team_id, _suite(suite, spec), label=f"job:{job_id}@{iteration}", model_dir=path,
                     job=job, iteration=iteration, spec=spec) for suite in spec.evaluation]
        ids = [row.id for row in rows]
    with session_scope() as session:  # committed: the runners read their rows
        for evaluation_id in ids:
            row = session.get(Evaluation, evaluation_id)
            if row is not None:
                dispatch(session, client, row)
    return ids


def get(session: Session, team: Team, evaluation_id: int) -> Evaluation:
    row = session.get(Evaluation, evaluation_id)
    if row is None or row.team_id != team.id:
        raise not_found("evaluation", evaluation_id)
    return row


def list_for(session: Session, team: Team, *, job_id: int | None = None, limit: int = 100) -> list[Evaluation]:
    query = select(Evaluation).where(Evaluation.team_id == team.id)
    if job_id is not None:
        query = query.where(Evaluation.job_id == job_id)
    return list(session.scalars(query.order_by(Evaluation.id.desc()).limit(limit)))


def pending(job_id: int) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).where(Evaluation.job_id == job_id,
                                                              Evaluation.status.in_(ACTIVE))) or 0)


def checkpoint_values(job_id: int, metric: str) -> dict[int, float | None]:
    """Each recorded checkpoint's value of `metric` (None: not scored yet)."""
    with session_scope() as session:
        rows = session.execute(select(Checkpoint.iteration, Checkpoint.scores).where(Checkpoint.job_id == job_id))
        return {iteration: metric_value(scores or {}, metric) for iteration, scores in rows}


def _mark_best(session: Session, job_id: int) -> None:
    job = session.get(Job, job_id)
    if job is None:
        return
    spec = JobSpec.model_validate(job.spec)
    if spec.checkpoint.select != "best":
        return
    rows = [c for c in session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id)) if Path(c.path).is_dir()]
    best = best_of({c.iteration: metric_value(c.scores or {}, spec.checkpoint.metric) for c in rows})
    for c in rows:
        c.best = c.iteration == best


def final_retention(session: Session, job_id: int) -> list[int]:
    """After the last checkpoint's evaluations (the driver does not wait for them): with `checkpoint.select: best`,
    once the job's final checkpoint is recorded and none of its evaluations is queued or running, delete the
    checkpoints retention does not keep (a checkpoint never scored counts as lowest). Returns the deleted iterations."""
    job = session.get(Job, job_id)
    if job is None:
        return []
    spec = JobSpec.model_validate(job.spec)
    rows = list(session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id)))
    if spec.checkpoint.select != "best" or not any(c.iteration == spec.training.iterations for c in rows):
        return []
    if session.scalar(select(func.count()).where(Evaluation.job_id == job_id, Evaluation.status.in_(ACTIVE))):
        return []
    on_disk = {c.iteration: c for c in rows if Path(c.path).is_dir()}
    values = {it: metric_value(c.scores or {}, spec.checkpoint.metric) for it, c in on_disk.items()}
    values = {it: float("-inf") if v is None else v for it, v in values.items()}
    keep = retained(list(on_disk), values, keep=spec.checkpoint.keep, select="best")
    deleted = sorted(it for it in on_disk if it not in keep)
    for it in deleted:
        shutil.rmtree(on_disk[it].path, ignore_errors=True)
    return deleted


class DatabaseEvaluationStore(EvaluationStore):
    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine  # None: the configured database

    def claim(self, evaluation_id: int) -> EvaluationTask | None:
        with session_scope(self.engine) as session:
            row = session.get(Evaluation, evaluation_id, with_for_update=True)
            if row is None or row.status != "queued":
                return None
            row.status = "running"
            return EvaluationTask(evaluation_id=row.id, team_id=row.team_id, model_dir=row.model_dir,
                                  suite=dict(row.suite), dataset_path=row.dataset_path, seed=row.seed,
                                  generation=row.generation)

    def finish(self, evaluation_id: int, summary: dict[str, float], rows: list[dict[str, Any]]) -> None:
        with session_scope(self.engine) as session:
            row = session.get(Evaluation, evaluation_id, with_for_update=True)
            if row is None:
                return
            job_id = row.job_id
            row.status, row.summary, row.rows = "succeeded", summary, {"rows": rows}
            row.finished_at = datetime.now(UTC)
            session.add(UsageRecord(team_id=row.team_id, job_id=row.job_id, api_key_id=None, pool="generation",
                                    source="evaluation", iteration=None,
                                    device_seconds=max(0.0, float(summary.get("device_seconds", 0.0))),
                                    tokens_generated=max(0, int(summary.get("tokens_generated", 0))),
                                    tokens_trained=0))
            if row.job_id is not None and row.iteration is not None:
                checkpoint = session.scalar(select(Checkpoint).where(Checkpoint.job_id == row.job_id,
                                                                     Checkpoint.iteration == row.iteration)
                                            .with_for_update())
                if checkpoint is not None:
                    checkpoint.scores = {**(checkpoint.scores or {}), row.suite_name: summary}
                    session.flush()
                    _mark_best(session, row.job_id)
        if job_id is not None:
            self._final_retention(job_id)

    def fail(self, evaluation_id: int, error: str) -> None:
        with session_scope(self.engine) as session:
            row = session.get(Evaluation, evaluation_id)
            if row is None:
                return
            row.status, row.error, row.finished_at = "failed", error[:4000], datetime.now(UTC)
            job_id = row.job_id
        if job_id is not None:
            self._final_retention(job_id)

    def _final_retention(self, job_id: int) -> None:
        with session_scope(self.engine) as session:
            final_retention(session, job_id)
