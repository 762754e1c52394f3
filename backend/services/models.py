"""Model registry: the only model directories a team's jobs may load.

A path (absolute, or relative to the artifact dir) is accepted only if it resolves (symlinks followed) to a
directory holding a `config.json` in one of:
- `<artifact_dir>/models/...`: base models the operator placed there, shared by every team;
- `<artifact_dir>/jobs/<job id>/...`: a checkpoint or the weights of one of the caller's team's own jobs
  ("continue from checkpoint"); another team's job answers 422 exactly like a job that does not exist;
- an operator allow-listed root (`STREAMRL_ALLOWED_MODEL_ROOTS`), unless it lies inside the artifact dir (then the
  two rules above decide: an allow-listed root never opens other teams' job directories or datasets).
Specs then name the model, so users never make workers read arbitrary server paths.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Job, Model, Team, User
from backend.services.errors import Conflict, InvalidInput

SHARED_MODELS_DIR = "models"
JOBS_DIR = "jobs"
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


def register_model(
    *, session: Session, team: Team, user: User, name: str, path: str, artifact_dir: Path, allowed_roots: list[Path]
) -> Model:
    resolved = resolve_model_path(
        path, session=session, team=team, artifact_dir=artifact_dir, allowed_roots=allowed_roots
    )
    if session.scalar(select(Model.id).where(Model.team_id == team.id, Model.name == name)) is not None:
        raise Conflict(f"a model named {name!r} is already registered in this team")
    model = Model(team_id=team.id, name=name, path=str(resolved), created_by_id=user.id)
    session.add(model)
    session.flush()
    return model


def list_models(*, session: Session, team: Team) -> list[Model]:
    return list(session.scalars(select(Model).where(Model.team_id == team.id).order_by(Model.id)))


def find_model(*, session: Session, team_id: int, name: str) -> Model | None:
    return session.scalar(select(Model).where(Model.team_id == team_id, Model.name == name))
