"""The Tinker training API mapped onto the platform (docs/tinker.md; routes: backend/api/routes/tinker.py).

    create_session            -> a Redis record of the SDK session (team, user), kept alive by its heartbeats
    create_model (LoRA)       -> a platform Job tagged `tinker` named by the SDK's model id `<session>:train:<n>`: the
                                 controller admits it within the team's quotas and the training pool's slots and sends
                                 `training.tinker_session`, which loads the model and serves the session's requests
    forward_backward, optim_step, save/load weights
                              -> entries of the job's request stream (`keys.tinker_requests`), carrying the SDK's seq
                                 ids; the session worker runs them in seq order and writes each outcome under
                                 `keys.tinker_result(request_id)`
    retrieve_future           -> that outcome, `try_again` while it is pending (queue_state `paused_capacity` while
                                 the job waits for a training slot or is parked), a retryable (`server`) failure once
                                 the session is gone without answering (cancel, its worker lost too often)
    a call to a parked session-> its job queued again (backend/services/tinker_parking.py): restored, it serves the call

Another team's session, model, request, sampler or checkpoint is a 404. Checkpoints live under
`<artifacts>/tinker/<team>/<job>/{weights,sampler_weights}/<name>` and are the job's platform Checkpoint rows.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.enums import TERMINAL_JOB_STATUSES, JobStatus
from backend.db.models import Job, Model, Team, User
from backend.services import jobs as job_service
from backend.services import tinker_checkpoints as checkpoints
from backend.services.errors import ServiceError
from backend.services.models import find_model, job_model
from backend.services.tinker_parking import park_file, parking_info, wake
from contract import keys
from contract.spec import JobSpec

TAG = "tinker"
SESSION_TTL_S = 600  # an SDK session beats every 10 s; one silent this long is gone
RESULT_TTL_S = 3600
NAME = re.compile(r"^[A-Za-z0-9._-]{1,120}$")
EPHEMERAL = "ephemeral-"  # save_weights_and_get_sampling_client's unnamed saves (not listed)
KINDS = {"weights": "training", "sampler_weights": "sampler"}


class TinkerError(Exception):
    """An HTTP error answered as `{"detail": message}` (the SDK raises its typed APIStatusError with it)."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code, self.message = status_code, message


def unsupported(name: str) -> TinkerError:
    return TinkerError(400, f"not supported by this server: {name} (see docs/tinker.md for what is)")


def not_found(what: str, ident: str) -> TinkerError:
    return TinkerError(404, f"{what} {ident!r} not found")


def is_tinker_job(job: Job) -> bool:
    return TAG in (job.tags or [])


# -- sessions -------------------------------------------------------------------------------------------------------
def create_session(client: redis.Redis, team: Team, user: User) -> str:
    session_id = f"{team.id}-{secrets.token_hex(8)}"
    client.set(keys.tinker_session(session_id), json.dumps({"team_id": team.id, "user_id": user.id}),
               ex=SESSION_TTL_S)
    return session_id


def require_session(client: redis.Redis, session_id: str, team: Team) -> dict[str, Any]:
    raw = client.get(keys.tinker_session(session_id))
    record = json.loads(raw) if raw else None
    if record is None or record["team_id"] != team.id:
        raise not_found("session", session_id)
    return record


def heartbeat(client: redis.Redis, session_id: str, team: Team) -> None:
    """Refresh the session; an expired or finished one is 410 (the SDK then stops beating)."""
    raw = client.get(keys.tinker_session(session_id))
    if raw is None:
        if session_id.startswith(f"{team.id}-"):
            raise TinkerError(410, f"session {session_id!r} has finished")
        raise not_found("session", session_id)
    if json.loads(raw)["team_id"] != team.id:
        raise not_found("session", session_id)
    client.expire(keys.tinker_session(session_id), SESSION_TTL_S)


def finish_session(session: Session, client: redis.Redis, session_id: str, team: Team, artifacts: Path) -> None:
    """ServiceClient.close(): the session's training sessions end now (their slots are freed; a parked one ends
    where it is, its park state removed) and it beats no more."""
    require_session(client, session_id, team)
    for job in session.scalars(select(Job).where(Job.team_id == team.id, Job.name.startswith(f"{session_id}:train:"),
                                                 Job.status.not_in(list(TERMINAL_JOB_STATUSES)))
                               .with_for_update()):
        if job.status == JobStatus.parked:
            job_service.record_event(session=session, job_id=job.id, kind="tinker",
                                     message="training session ended (closed by the client) while parked")
            job_service.transition_job(session=session, job=job, to=JobStatus.succeeded)
            park_file(artifacts, job).unlink(missing_ok=True)
        else:
            enqueue(client, job, seq=None, kind="end", payload={})
    session.commit()
    client.delete(keys.tinker_session(session_id))


# -- models (training runs) -----------------------------------------------------------------------------------------
def supported_models(session: Session, team: Team) -> list[dict[str, Any]]:
    names = session.scalars(select(Model.name).where(Model.team_id == team.id, Model.state == "ready")
                            .distinct().order_by(Model.name))  # a name once, whatever its versions
    return [{"model_name": name, "trainable": True, "sampleable": True} for name in names]


def model_id_of(session_id: str, model_seq_id: int) -> str:
    return f"{session_id}:train:{model_seq_id}"  # what the SDK derives itself for create-via-load


def _spec(base_model: str, model_id: str, rank: int, seed: int | None) -> JobSpec:
    return JobSpec.model_validate({
        "name": model_id, "model": base_model, "mode": "colocated", "seed": seed or 0,
        "dataset": {"builtin": "arithmetic", "num_prompts": 1, "eval_prompts": 0},  # no prompts are drawn
        "generation": {"instances": 1},
        "training": {"iterations": 1_000_000, "lora": {"rank": rank, "alpha": 32.0}},
        "failover": {"max_restarts": 0},  # a dead session is not restarted: resume from its last save_state
        "checkpoint": {"interval": 1_000_000},
    })


def create_training_run(session: Session, client: redis.Redis, team: Team, user: User, *, session_id: str,
                        model_seq_id: int, base_model: str, rank: int, seed: int | None,
                        load: dict[str, Any] | None = None) -> tuple[Job, str]:
    """A queued tinker job for one TrainingClient, and the request id of its creation (its first request)."""
    require_session(client, session_id, team)
    model_id = model_id_of(session_id, model_seq_id)
    if session.scalar(select(Job.id).where(Job.team_id == team.id, Job.name == model_id)) is not None:
        raise TinkerError(409, f"model {model_id!r} already exists")
    if not 1 <= rank <= 1024:
        raise TinkerError(400, f"lora_config.rank must be between 1 and 1024, not {rank}")
    model = find_model(session=session, team_id=team.id, name=base_model)
    if model is None or model.state != "ready":
        names = [m["model_name"] for m in supported_models(session, team)]
        raise TinkerError(400, f"base_model {base_model!r} is not a ready model of this team; supported: {names}")
    try:
        job = job_service.create_job(session=session, team=team, user=user,
                                     spec=_spec(base_model, model_id, rank, seed))
    except ServiceError as err:
        raise TinkerError(err.status_code, err.detail) from err
    job.tags, job.target_instances = [TAG], 0
    session.flush()
    request_id = new_request_id(job)
    payload = {"model_id": model_id, "rank": rank, "seed": seed, "load": load}
    enqueue(client, job, seq=0, kind="create", payload=payload, request_id=request_id)
    return job, request_id


def get_training_run(session: Session, team: Team, model_id: str) -> Job:
    job = session.scalar(select(Job).where(Job.team_id == team.id, Job.name == model_id))
    if job is None or not is_tinker_job(job):
        raise not_found("model", model_id)
    return job


def model_info(session: Session, job: Job) -> dict[str, Any]:
    """GetInfoResponse: `tokenizer_id` is the base model's directory on the artifact store, so `get_tokenizer()`
    loads it offline where that directory is reachable (the same machine or a shared mount)."""
    spec = JobSpec.model_validate(job.spec)
    model = job_model(session, job)
    rank = spec.training.lora.rank if spec.training.lora else None
    return {"type": "get_info", "model_id": job.name, "is_lora": True, "lora_rank": rank, "model_name": spec.model,
            "model_data": {"arch": "lora", "model_name": spec.model,
                           "tokenizer_id": model.path if model is not None else None}}


def training_run(session: Session, job: Job, artifacts: Path) -> dict[str, Any]:
    spec = JobSpec.model_validate(job.spec)
    checkpoints = list_checkpoints(session, job, artifacts)
    by_kind = {kind: next((c for c in checkpoints if c["checkpoint_type"] == kind), None)
               for kind in ("training", "sampler")}
    moment = job.finished_at or job.started_at or job.created_at
    return {"training_run_id": job.name, "base_model": spec.model, "model_owner": f"team-{job.team_id}",
            "is_lora": True, "lora_rank": spec.training.lora.rank if spec.training.lora else None,
            "corrupted": job.status == JobStatus.failed, "last_request_time": moment.isoformat(),
            "last_checkpoint": by_kind["training"], "last_sampler_checkpoint": by_kind["sampler"],
            **parking_info(session, job)}  # beyond Tinker's TrainingRun (the SDK ignores them)


def list_training_runs(session: Session, team: Team, artifacts: Path, limit: int, offset: int) -> dict[str, Any]:
    jobs = [job for job in session.scalars(select(Job).where(Job.team_id == team.id).order_by(Job.id.desc()))
            if is_tinker_job(job)]
    page = jobs[offset:offset + limit]
    return {"training_runs": [training_run(session, job, artifacts) for job in page],
            "cursor": {"offset": offset, "limit": limit, "total_count": len(jobs)}}


# -- requests and futures -------------------------------------------------------------------------------------------
def new_request_id(job: Job) -> str:
    return f"{job.id}.{secrets.token_hex(8)}"


def enqueue(client: redis.Redis, job: Job, *, seq: int | None, kind: str, payload: dict[str, Any],
            request_id: str | None = None) -> str:
    """Append one request to the job's stream; the session worker runs them in seq order (`seq` None: at once)."""
    request_id = request_id or new_request_id(job)
    entry = {"request_id": request_id, "kind": kind, "seq": "" if seq is None else str(seq),
             "payload": json.dumps(payload)}
    client.xadd(keys.tinker_requests(job.id), entry)  # type: ignore[arg-type]
    return request_id


def submit(session: Session, client: redis.Redis, team: Team, model_id: str, seq_id: int | None, kind: str,
           payload: dict[str, Any]) -> str:
    job = get_training_run(session, team, model_id)
    if job.status in TERMINAL_JOB_STATUSES:
        raise TinkerError(400, ended_message(job))
    if seq_id is None or seq_id < 1:
        raise TinkerError(400, f"seq_id must be 1 or more, not {seq_id}")
    request_id = enqueue(client, job, seq=seq_id, kind=kind, payload=payload)
    wake(session, client, job)  # after the call is in the stream: a session parking now finds it there itself
    return request_id


def ended_message(job: Job) -> str:
    why = f": {job.error}" if job.error else ""
    return (f"the training session of {job.name!r} has ended ({job.status}{why}); resume it from its last "
            "save_state with ServiceClient.create_training_client_from_state_with_optimizer(path)")


@dataclass(frozen=True)
class Outcome:
    """One retrieve_future answer: `result` (JSON body, or a proto kind to encode), `pending`, or a failure."""

    result: dict[str, Any] | None = None
    pending: str | None = None  # queue_state of a try_again
    error: str | None = None
    category: str = "server"


def job_of_request(session: Session, team: Team, request_id: str) -> Job:
    head = request_id.split(".", 1)[0]
    job = session.get(Job, int(head)) if head.isdigit() and len(head) < 12 else None
    if job is None or job.team_id != team.id:
        raise not_found("request", request_id)
    return job


def peek(session: Session, client: redis.Redis, team: Team, request_id: str) -> Outcome:
    """The request's outcome now (a pending one says why it waits)."""
    job = job_of_request(session, team, request_id)
    raw = client.get(keys.tinker_result(request_id))
    if raw is not None:
        return stored_outcome(raw)
    session.refresh(job)
    if job.status in TERMINAL_JOB_STATUSES:
        return Outcome(error=ended_message(job), category="server")
    waiting = job.status in (JobStatus.queued, JobStatus.parked)  # parked: a call has woken it or is about to
    return Outcome(pending="paused_capacity" if waiting else "active")


def stored_outcome(raw: bytes | str) -> Outcome:
    """A stored result (the session's or a sample's) as an Outcome."""
    stored = json.loads(raw)
    if "error" in stored:
        return Outcome(error=stored["error"], category=stored.get("category", "server"))
    return Outcome(result=stored)


def store_result(client: redis.Redis, request_id: str, result: dict[str, Any]) -> None:
    client.set(keys.tinker_result(request_id), json.dumps(result), ex=RESULT_TTL_S)


# -- checkpoints ----------------------------------------------------------------------------------------------------
def checkpoint_dir(artifacts: Path, job: Job, kind: str, name: str) -> Path:
    return Path(artifacts) / "tinker" / str(job.team_id) / str(job.id) / kind / name


def check_name(name: str | None, what: str = "path") -> str:
    if name is None or not NAME.match(name):
        raise TinkerError(400, f"{what} must be 1-120 characters of letters, digits, '.', '_' or '-', not {name!r}")
    return name


def tinker_path(job: Job, kind: str, name: str) -> str:
    return f"tinker://{job.name}/{kind}/{name}"


def resolve_path(session: Session, team: Team, artifacts: Path, path: str, key_id: int | None = None, *,
                 owner_only: bool = False) -> tuple[Job, str, Path]:
    """`tinker://<training run>/<weights|sampler_weights>/<name>` -> its job, kind and directory (404: not ours,
    expired, or unpublished and asked for with another key than its run's; `owner_only`: the run's key alone)."""
    if not path.startswith("tinker://"):
        raise TinkerError(400, f"path must be a tinker:// path, not {path[:200]!r}")
    run, _, rest = path.removeprefix("tinker://").partition("/")
    kind, _, name = rest.partition("/")
    if kind not in KINDS or not NAME.match(name):
        raise TinkerError(400, f"path {path[:200]!r} is not tinker://<run>/weights/<name> or "
                               "tinker://<run>/sampler_weights/<name>")
    job = session.scalar(select(Job).where(Job.team_id == team.id, Job.name == run))
    if job is None or not is_tinker_job(job):
        raise not_found("checkpoint", path)
    directory = checkpoint_dir(artifacts, job, kind, name)
    if not directory.is_dir():
        raise not_found("checkpoint", path)
    try:
        checkpoints.check_access(job, directory, key_id, path)
    except checkpoints.CheckpointError as err:
        raise TinkerError(err.status_code, err.message) from err
    if owner_only and job.created_by_key_id not in (None, key_id):
        raise TinkerError(403, f"only the API key that created {job.name!r} may change its checkpoints")
    return job, kind, directory


def list_checkpoints(session: Session, job: Job, artifacts: Path) -> list[dict[str, Any]]:
    """The run's saves, newest first, from its directories (a step's platform Checkpoint row is its last save)."""
    found = []
    for kind, checkpoint_type in KINDS.items():
        root = checkpoint_dir(artifacts, job, kind, "x").parent
        for directory in root.iterdir() if root.is_dir() else []:
            if not directory.is_dir() or directory.name.endswith(".tmp") or directory.name.startswith(EPHEMERAL) \
                    or ".deleting-" in directory.name:
                continue
            settings = checkpoints.listing_fields(directory)
            if settings is None:  # expired: gone now, deleted by the controller's next sweep
                continue
            stat = directory.stat()
            size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
            found.append((stat.st_mtime, {
                "checkpoint_id": f"{kind}/{directory.name}", "checkpoint_type": checkpoint_type,
                "time": datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(),
                "tinker_path": tinker_path(job, kind, directory.name), "size_bytes": size, **settings}))
    return [entry for _, entry in sorted(found, key=lambda item: item[0], reverse=True)]
