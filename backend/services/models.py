"""Model registry: the only model directories a team's jobs may load.

A path (absolute, or relative to the artifact dir) is accepted only if it resolves (symlinks followed) to a
directory holding a `config.json` in one of:
- `<artifact_dir>/models/...`: base models the operator placed there, shared by every team;
- `<artifact_dir>/jobs/<job id>/...`: a checkpoint or the weights of one of the caller's team's own jobs
  ("continue from checkpoint"); another team's job answers 422 exactly like a job that does not exist;
- an operator allow-listed root (`STREAMRL_ALLOWED_MODEL_ROOTS`), unless it lies inside the artifact dir (then the
  two rules above decide: an allow-listed root never opens other teams' job directories or datasets).
Specs then name the model, so users never make workers read arbitrary server paths.

Besides a path, a model comes from an uploaded archive (backend/services/model_archive.py) or a Hub id + revision
(backend/services/model_hub.py); both land in the team's own `<artifact_dir>/team-models/<team id>/<model id>/`,
which no path registration can name. Every directory is validated (backend/services/model_card.py) before its
model is `ready`; a refused registration leaves no row and no files.

Versions: registering (or uploading) a name the team already has adds the next version of that name; a spec's name
resolves to its newest version (`find_model`) when the job is submitted and the job keeps that row (`Job.model_id`).
A version is deleted only while no unfinished job uses it (409 naming the jobs); its files go with it when the
platform owns them (uploads and Hub downloads), never a server directory it was merely pointed at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.db.enums import TERMINAL_JOB_STATUSES
from backend.db.models import Job, Model, Team, User
from backend.services.errors import Conflict, InvalidInput, StoreUnavailable
from backend.services.model_archive import extract_archive
from backend.services.model_card import inspect_model_dir
from backend.services.secret_box import seal
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.models import TEAM_MODELS_DIR, upload_model
from contract.rewards.model_graders import model_refs
from contract.spec import JobSpec

SHARED_MODELS_DIR = "models"
JOBS_DIR = "jobs"
HUB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}(/[A-Za-z0-9][\w.\-]{0,95})?$")
REVISION_PATTERN = re.compile(r"^[\w.\-/]{1,200}$")
PATH_PATTERN = re.compile(r"^[\w.\-/ +=@,:]+$")  # no `~`, no control characters, no backslashes
MAX_PATH_CHARS = 1000


def _refuse(raw: str, reason: str) -> InvalidInput:
    return InvalidInput(f"path {raw!r} {reason}", loc=("body", "path"))


def _own_job_dir(session: Session, team: Team, relative: Path, raw: str) -> None:
    """`relative` (to the artifact dir) is under `jobs/<id>/` of a job of `team`, else 422."""
    parts = relative.parts
    if len(parts) < 3 or not parts[1].isdigit() or len(parts[1]) > 10:
        raise _refuse(raw, "is not a checkpoint or weights directory of a job: use jobs/<job id>/checkpoints/<name>")
    job_id = int(parts[1])
    if session.scalar(select(Job.id).where(Job.id == job_id, Job.team_id == team.id)) is None:
        raise _refuse(raw, f"belongs to no job of your team (job {job_id})")


def resolve_model_path(
    raw: str, *, session: Session, team: Team, artifact_dir: Path, allowed_roots: list[Path]
) -> Path:
    """The resolved model directory; `InvalidInput` (loc body.path) when `team` may not register it."""
    if len(raw) > MAX_PATH_CHARS or not PATH_PATTERN.match(raw):
        raise _refuse(raw[:100], "has characters a model path may not use (letters, digits, . - _ / and spaces)")
    candidate = Path(raw)
    artifacts = artifact_dir.resolve()
    try:
        path = (candidate if candidate.is_absolute() else artifacts / candidate).resolve()
        has_config = (path / "config.json").is_file()
    except (OSError, RuntimeError, ValueError) as exc:  # too long a name, a symlink loop...
        raise _refuse(raw, f"cannot be used ({exc.__class__.__name__})") from None
    if path.is_relative_to(artifacts):
        relative = path.relative_to(artifacts)
        top = relative.parts[0] if relative.parts else ""
        if top == JOBS_DIR:
            _own_job_dir(session, team, relative, raw)
        elif top != SHARED_MODELS_DIR:
            raise _refuse(raw, f"is inside the artifact dir but not under {SHARED_MODELS_DIR}/ or jobs/<your job>/")
    elif not any(path.is_relative_to(root.resolve()) for root in allowed_roots):
        allowed = ", ".join(str(root) for root in [artifacts / SHARED_MODELS_DIR, *allowed_roots])
        raise _refuse(raw, f"is outside the allowed model roots ({allowed} or jobs/<your job>/)")
    if not has_config:
        raise _refuse(raw, "is not a model directory (no config.json)")
    return path


def _next_version(session: Session, team: Team, name: str) -> int:
    """The version a new registration of `name` gets: 1, or one past the team's newest of that name."""
    newest = session.scalar(select(func.max(Model.version)).where(Model.team_id == team.id, Model.name == name))
    return (newest or 0) + 1


def _card_of(path: Path) -> dict[str, Any]:
    try:
        return inspect_model_dir(path)
    except InvalidInput as exc:
        raise InvalidInput(exc.detail, loc=("body", "path")) from None


def register_model(
    *, session: Session, team: Team, user: User, name: str, path: str, artifact_dir: Path, allowed_roots: list[Path]
) -> Model:
    """A ready model from a directory the team may name (validated: config, weights, tokenizer)."""
    resolved = resolve_model_path(
        path, session=session, team=team, artifact_dir=artifact_dir, allowed_roots=allowed_roots
    )
    model = Model(team_id=team.id, name=name, version=_next_version(session, team, name), path=str(resolved),
                  created_by_id=user.id, state="ready", source="directory", card=_card_of(resolved))
    session.add(model)
    session.flush()
    return model


def team_model_dir(artifact_dir: Path, team: Team, model_id: int) -> Path:
    return artifact_dir.resolve() / TEAM_MODELS_DIR / str(team.id) / str(model_id)


def register_archive(*, session: Session, team: Team, user: User, name: str, content: bytes, artifact_dir: Path,
                     max_bytes: int) -> Model:
    """A ready model from an uploaded archive, unpacked into the team's own directory. On any error the directory
    is removed and the row rolled back by the caller (nothing half-registered)."""
    model = Model(team_id=team.id, name=name, version=_next_version(session, team, name), path="",
                  created_by_id=user.id, state="ready", source="archive")
    session.add(model)
    session.flush()  # the id names the directory
    root = team_model_dir(artifact_dir, team, model.id)
    try:
        model_dir = extract_archive(content, root.with_name(f"{model.id}.unpacking"), max_bytes=max_bytes)
        model.card = inspect_model_dir(model_dir)
        model_dir.rename(root)
        upload_model(team.id, model.id, root, artifact_dir)  # hosts without the shared volume read it from the store
    except ArtifactStoreError as err:
        shutil.rmtree(root, ignore_errors=True)
        raise StoreUnavailable(f"the model could not be stored: {err}") from err
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(root.with_name(f"{model.id}.unpacking"), ignore_errors=True)
        raise
    finally:
        shutil.rmtree(root.with_name(f"{model.id}.unpacking"), ignore_errors=True)
    model.path = str(root)
    session.flush()
    return model


def register_hub(*, session: Session, team: Team, user: User, name: str, hub_id: str, revision: str,
                 artifact_dir: Path) -> Model:
    """A `downloading` model; the caller starts the download (backend/services/model_hub.py) after committing."""
    if not HUB_ID_PATTERN.match(hub_id):
        raise InvalidInput(f"hub_id {hub_id!r} is not a Hub model id (owner/name)", loc=("body", "hub_id"))
    if not REVISION_PATTERN.match(revision) or ".." in revision:
        raise InvalidInput(f"revision {revision!r} is not a branch, tag or commit", loc=("body", "revision"))
    model = Model(team_id=team.id, name=name, version=_next_version(session, team, name), path="",
                  created_by_id=user.id, state="downloading", source="hub",
                  hub_id=hub_id, revision=revision, progress={"done_bytes": 0, "total_bytes": 0})
    session.add(model)
    session.flush()
    model.path = str(team_model_dir(artifact_dir, team, model.id))
    session.flush()
    return model


def set_hub_token(*, session: Session, team_id: int, token: str | None, secret_key: str) -> bool:
    """Store the team's Hub token encrypted (None: forget it); return whether one is set. Never returned."""
    if token is not None and (not token.strip() or len(token) > 500 or any(c.isspace() for c in token)):
        raise InvalidInput("token must be 1-500 characters without spaces", loc=("body", "token"))
    team = session.get(Team, team_id)
    assert team is not None, "the caller's team exists"
    team.hub_token_sealed = seal(secret_key, token) if token is not None else None
    session.flush()
    return team.hub_token_sealed is not None


def hub_token_set(*, session: Session, team_id: int) -> bool:
    return session.scalar(select(Team.hub_token_sealed).where(Team.id == team_id)) is not None


def get_model(*, session: Session, team: Team, model_id: int) -> Model | None:
    return session.scalar(select(Model).where(Model.id == model_id, Model.team_id == team.id))


def list_models(*, session: Session, team: Team) -> list[Model]:
    """Every version of every model of the team, by name then newest version first."""
    return list(session.scalars(select(Model).where(Model.team_id == team.id)
                                .order_by(Model.name, Model.version.desc())))


def find_model(*, session: Session, team_id: int, name: str) -> Model | None:
    """The newest version of the team's model `name` (what a spec naming it gets at submission)."""
    return session.scalar(select(Model).where(Model.team_id == team_id, Model.name == name)
                          .order_by(Model.version.desc()).limit(1))


def job_model(session: Session, job: Job) -> Model | None:
    """The model version a job loads: the one it was submitted with, else (a job from before versions) the newest
    of the name its spec gives."""
    if job.model_id is not None:
        return session.get(Model, job.model_id)
    return find_model(session=session, team_id=job.team_id, name=str(job.spec.get("model")))


def _names_in_spec(spec: dict[str, Any]) -> set[str]:
    """The registered model names a stored spec loads by name at run time: tokenizer, teacher, grader models."""
    try:
        parsed = JobSpec.model_validate(spec)
    except ValueError:
        return set()
    names = {name for _, _, name in (model_refs(parsed.grading[0]) if parsed.grading else [])}
    return names | {n for n in (parsed.tokenizer, parsed.algorithm.teacher) if n}


def jobs_using(session: Session, model: Model) -> list[Job]:
    """The team's unfinished jobs that load this version: as their policy (pinned), or (when it is the newest of its
    name, which a name resolves to) by name as policy, tokenizer, teacher or grader."""
    unfinished = list(session.scalars(select(Job).where(Job.team_id == model.team_id,
                                                        Job.status.not_in(TERMINAL_JOB_STATUSES)).order_by(Job.id)))
    newest = find_model(session=session, team_id=model.team_id, name=model.name)
    by_name = newest is not None and newest.id == model.id
    return [job for job in unfinished if job.model_id == model.id or (by_name and (
        (job.model_id is None and job.spec.get("model") == model.name) or model.name in _names_in_spec(job.spec)))]


def delete_model(*, session: Session, team: Team, model: Model, artifact_dir: Path) -> None:
    """Delete one version: 409 while an unfinished job uses it or its Hub download runs; the platform's own copy
    (upload, Hub) is removed after the row, a server directory it was registered from is left alone."""
    if model.state == "downloading":
        raise Conflict(f"model {model.name!r} version {model.version} is still downloading: wait until it is "
                       f"ready or failed, then delete it")
    users = jobs_using(session, model)
    if users:
        named = ", ".join(f"#{job.id} ({job.status})" for job in users[:10])
        raise Conflict(f"model {model.name!r} version {model.version} is used by unfinished jobs: {named}; "
                       f"cancel them or wait until they end", job_ids=[job.id for job in users])
    owned = team_model_dir(artifact_dir, team, model.id)
    session.delete(model)
    session.flush()
    if Path(model.path).resolve() == owned:
        shutil.rmtree(owned, ignore_errors=True)
