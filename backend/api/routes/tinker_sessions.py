"""The team's Tinker sessions for the dashboard's Sessions page (backend/services/tinker_sessions_view.py)."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import IdPath, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.tinker_sessions import TinkerSessionDetail, TinkerSessionPublic
from backend.services.tinker_sessions_view import list_sessions, session_detail

router = APIRouter(tags=["tinker"], responses=errors(*AUTHENTICATED))


@router.get("/tinker/sessions")
def get_tinker_sessions(auth: ViewerAuth, session: SessionDep, settings: SettingsDep) -> list[TinkerSessionPublic]:
    """The team's Tinker training clients, newest first (at most 200): owner, base model, steps, last call, parked
    state, checkpoints with expiry and user_metadata."""
    return [TinkerSessionPublic.model_validate(item) for item in list_sessions(session, auth.team, settings.artifacts)]


@router.get("/tinker/sessions/{job_id}", responses=errors(404))
def get_tinker_session(job_id: IdPath, auth: ViewerAuth, session: SessionDep,
                       settings: SettingsDep) -> TinkerSessionDetail:
    """One session with every recorded step (loss and the session's compute time per step)."""
    return TinkerSessionDetail.model_validate(session_detail(session, auth.team, settings.artifacts, job_id))
