"""Registered models of the current team."""

from __future__ import annotations

from fastapi import APIRouter, status

from backend.api.deps import MemberAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.assets import ModelCreate, ModelPublic
from backend.schemas.common import Page
from backend.services import models as model_service

router = APIRouter(prefix="/models", tags=["models"], responses=errors(*AUTHENTICATED))


@router.get("")
def list_models(auth: ViewerAuth, session: SessionDep) -> Page[ModelPublic]:
    """Models the team's jobs may load."""
    return page_of(ModelPublic, model_service.list_models(session=session, team=auth.team))


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(409))
def register_model(body: ModelCreate, auth: MemberAuth, session: SessionDep, settings: SettingsDep) -> ModelPublic:
    """Register a model directory under the artifact dir or an allow-listed root (member)."""
    model = model_service.register_model(
        session=session,
        team=auth.team,
        user=auth.user,
        name=body.name,
        path=body.path,
        artifact_dir=settings.artifacts,
        allowed_roots=settings.allowed_model_roots,
    )
    session.commit()
    return ModelPublic.model_validate(model)
