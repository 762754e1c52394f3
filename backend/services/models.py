"""Model registry: the only model directories a team's jobs may load.

A path is accepted only if it resolves (symlinks followed) under the artifact dir or an operator allow-listed root
and holds a `config.json`; specs then name the model, so users never make workers read arbitrary server paths.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Model, Team, User
from backend.services.errors import Conflict, InvalidInput


def resolve_model_path(raw: str, *, artifact_dir: Path, allowed_roots: list[Path]) -> Path:
    """The resolved model directory; `InvalidInput` (loc body.path) when it is outside the allowed roots."""
    candidate = Path(raw).expanduser()
    if not candidate.is_absolute():
        candidate = artifact_dir / candidate
    path = candidate.resolve()
    roots = [artifact_dir.resolve(), *(root.resolve() for root in allowed_roots)]
    if not any(path.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(root) for root in roots)
        raise InvalidInput(f"path {raw!r} is outside the allowed model roots ({allowed})", loc=("body", "path"))
    if not (path / "config.json").is_file():
        raise InvalidInput(f"path {raw!r} is not a model directory (no config.json)", loc=("body", "path"))
    return path


def register_model(
    *, session: Session, team: Team, user: User, name: str, path: str, artifact_dir: Path, allowed_roots: list[Path]
) -> Model:
    resolved = resolve_model_path(path, artifact_dir=artifact_dir, allowed_roots=allowed_roots)
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
