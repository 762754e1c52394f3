"""Registered models of the current team: from a server directory, an uploaded archive or the Hugging Face Hub."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Form, Request, UploadFile, status
from fastapi.responses import StreamingResponse

from backend.api.deps import AdminAuth, IdPath, MemberAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.assets import MODEL_NAME, HubTokenPublic, HubTokenUpdate, ModelCreate, ModelPublic
from backend.schemas.common import Page
from backend.services import model_hub
from backend.services import models as model_service
from backend.services.datasets import read_upload
from backend.services.errors import Conflict, NotFound, StoreUnavailable, not_found
from backend.services.exports import directory_members, tar_stream
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.models import local_model

router = APIRouter(prefix="/models", tags=["models"], responses=errors(*AUTHENTICATED))


@router.get("")
def list_models(auth: ViewerAuth, session: SessionDep) -> Page[ModelPublic]:
    """Models the team's jobs may load, with their state and card."""
    return page_of(ModelPublic, model_service.list_models(session=session, team=auth.team))


@router.post("", status_code=status.HTTP_201_CREATED)
def register_model(
    body: ModelCreate, request: Request, auth: MemberAuth, session: SessionDep, settings: SettingsDep
) -> ModelPublic:
    """Register a server directory (validated now: `ready`) or a Hub id + revision (`downloading`, then `ready` or
    `failed`; poll GET /models/{id}) (member). A name the team already has gets its next version."""
    if body.hub_id is not None:
        model = model_service.register_hub(session=session, team=auth.team, user=auth.user, name=body.name,
                                           hub_id=body.hub_id, revision=body.revision, artifact_dir=settings.artifacts)
        session.commit()
        model_hub.start_download(request.app.state.session_factory, model.id, settings)
        return ModelPublic.model_validate(model)
    assert body.path is not None
    model = model_service.register_model(
        session=session, team=auth.team, user=auth.user, name=body.name, path=body.path,
        artifact_dir=settings.artifacts, allowed_roots=settings.allowed_model_roots,
    )
    session.commit()
    return ModelPublic.model_validate(model)


@router.post("/upload", status_code=status.HTTP_201_CREATED, responses=errors(413))
def upload_model(
    request: Request,
    file: UploadFile,
    name: Annotated[str, Form(min_length=1, max_length=200, pattern=MODEL_NAME)],
    auth: MemberAuth,
    session: SessionDep,
    settings: SettingsDep,
) -> ModelPublic:
    """Upload a model directory as .tar(.gz|.bz2|.xz) or .zip (member; links, absolute paths and `..` are refused;
    at most STREAMRL_MAX_UPLOAD_BYTES); 422 names the problem and nothing is kept."""
    content = read_upload(file.file, declared_bytes=int(request.headers.get("content-length") or 0),
                          max_bytes=settings.max_upload_bytes)
    model = model_service.register_archive(session=session, team=auth.team, user=auth.user, name=name,
                                           content=content, artifact_dir=settings.artifacts,
                                           max_bytes=4 * settings.max_upload_bytes)
    try:
        session.commit()
    except BaseException:
        shutil.rmtree(Path(model.path), ignore_errors=True)  # no files without their row
        raise
    return ModelPublic.model_validate(model)


@router.get("/{model_id}")
def get_model(model_id: IdPath, auth: ViewerAuth, session: SessionDep) -> ModelPublic:
    """One model: state (downloading with progress, ready with its card, failed with the reason)."""
    model = model_service.get_model(session=session, team=auth.team, model_id=model_id)
    if model is None:
        raise not_found("model", model_id)
    return ModelPublic.model_validate(model)


@router.get(
    "/{model_id}/export.tar",
    responses={**errors(404, 409, 503),
               200: {"content": {"application/x-tar": {}}, "description": "the model's directory (HF layout)"}},
)
def export_model(model_id: IdPath, auth: ViewerAuth, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """The model version's directory as an uncompressed tar, streamed: an uploaded or Hub-downloaded model (read from
    the object store when this server's disk lacks it) or a registered server directory. 409 while it is not ready."""
    model = model_service.get_model(session=session, team=auth.team, model_id=model_id)
    if model is None:
        raise not_found("model", model_id)
    if model.state != "ready":
        raise Conflict(f"model {model.name!r} version {model.version} is {model.state}, not ready: nothing to "
                       "download yet")
    try:
        directory = local_model(model.team_id, Path(model.path), settings.artifacts)
    except ArtifactStoreError as err:
        raise StoreUnavailable(f"model {model.name!r} version {model.version}: {err}") from err
    if not directory.is_dir():
        raise NotFound(f"model {model.name!r} version {model.version}: its files are not on this server")
    name = f"{model.name}-v{model.version}"
    return StreamingResponse(tar_stream(directory, name, directory_members(directory)), media_type="application/x-tar",
                             headers={"Content-Disposition": f'attachment; filename="{name}.tar"'})


@router.delete("/{model_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(404, 409))
def delete_model(model_id: IdPath, auth: MemberAuth, session: SessionDep, settings: SettingsDep) -> None:
    """Delete one model version (member): 409 naming the jobs while an unfinished job uses it (or while its Hub
    download runs). Uploaded and downloaded files go with it; a registered server directory is left in place."""
    model = model_service.get_model(session=session, team=auth.team, model_id=model_id)
    if model is None:
        raise not_found("model", model_id)
    model_service.delete_model(session=session, team=auth.team, model=model, artifact_dir=settings.artifacts)
    session.commit()


@router.put("/hub-token", responses=errors(403))
def set_hub_token(body: HubTokenUpdate, auth: AdminAuth, session: SessionDep, settings: SettingsDep) -> HubTokenPublic:
    """Set (or with null, forget) the team's Hugging Face token for gated/private models (admin). It is stored
    encrypted and never returned."""
    token_set = model_service.set_hub_token(session=session, team_id=auth.team.id, token=body.token,
                                            secret_key=settings.secret_key)
    session.commit()
    return HubTokenPublic(token_set=token_set)


@router.get("/hub-token/status")
def hub_token_status(auth: ViewerAuth, session: SessionDep) -> HubTokenPublic:
    """Whether the team has a Hub token (the token itself is never returned)."""
    return HubTokenPublic(token_set=model_service.hub_token_set(session=session, team_id=auth.team.id))
