"""The Tinker API's checkpoint routes (included by backend/api/routes/tinker.py): `delete`, `publish`, `unpublish`
and `set_checkpoint_ttl` of a training run's saves, as the SDK's RestClient calls them. Rules:
backend/services/tinker_checkpoints.py (only the key that created the run changes its saves; another team's: 404)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Response

from backend.api.deps import SessionDep, SettingsDep
from backend.api.routes.tinker_common import Auth, Body, TinkerRoute
from backend.services import tinker as svc
from backend.services import tinker_checkpoints as checkpoints

router = APIRouter(route_class=TinkerRoute, include_in_schema=False)


class Ttl(Body):
    ttl_seconds: Any = None


def _own(run_id: str, checkpoint_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> Path:
    """The save's directory, for the run's own key (404 for another team's or an expired save, 403 for another
    key of the team)."""
    job = svc.get_training_run(session, auth.team, run_id)
    path = svc.tinker_path(job, *checkpoint_id.partition("/")[::2])
    return svc.resolve_path(session, auth.team, settings.artifacts, path, auth.api_key.id if auth.api_key else None,
                            owner_only=True)[2]


@router.post("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/publish", status_code=204)
def publish(run_id: str, checkpoint_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> Response:
    checkpoints.set_public(_own(run_id, checkpoint_id, auth, session, settings), True)
    return Response(status_code=204)


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/publish", status_code=204)
def unpublish(run_id: str, checkpoint_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> Response:
    checkpoints.set_public(_own(run_id, checkpoint_id, auth, session, settings), False)
    return Response(status_code=204)


@router.put("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}/ttl", status_code=204)
def set_ttl(run_id: str, checkpoint_id: str, body: Ttl, auth: Auth, session: SessionDep,
            settings: SettingsDep) -> Response:
    try:
        ttl = checkpoints.check_ttl(body.ttl_seconds)
    except checkpoints.CheckpointError as err:
        raise svc.TinkerError(err.status_code, err.message) from err
    checkpoints.set_ttl(_own(run_id, checkpoint_id, auth, session, settings), ttl)
    return Response(status_code=204)


@router.delete("/training_runs/{run_id}/checkpoints/{checkpoint_id:path}", status_code=204)
def delete(run_id: str, checkpoint_id: str, auth: Auth, session: SessionDep, settings: SettingsDep) -> Response:
    checkpoints.delete(_own(run_id, checkpoint_id, auth, session, settings))
    return Response(status_code=204)
