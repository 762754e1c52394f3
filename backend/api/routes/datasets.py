"""Prompt datasets of the current team (JSONL, Parquet or CSV uploads), their rows and a chat preview."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, UploadFile, status

from backend.api.deps import IdPath, MemberAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.assets import DatasetHubCreate, DatasetPreview, DatasetPublic
from backend.schemas.common import MAX_OFFSET, Page
from backend.services import chat_preview, dataset_hub
from backend.services import datasets as dataset_service
from backend.services import models as model_service
from backend.services.errors import InvalidInput

router = APIRouter(prefix="/datasets", tags=["datasets"], responses=errors(*AUTHENTICATED))


@router.get("")
def list_datasets(
    auth: ViewerAuth,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> Page[DatasetPublic]:
    """The team's datasets, newest first."""
    rows, total = dataset_service.list_datasets(session=session, team=auth.team, limit=limit, offset=offset)
    return page_of(DatasetPublic, rows, total)


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(400, 409))
def upload_dataset(
    request: Request,
    file: UploadFile,
    name: Annotated[str, Form(min_length=1, max_length=200)],
    auth: MemberAuth,
    session: SessionDep,
    settings: SettingsDep,
) -> DatasetPublic:
    """Upload a JSONL, Parquet or CSV file of prompt rows (`prompt` text or chat messages, or OpenAI `messages`;
    other columns reach the reward); 422 names the first bad row and column, and nothing is stored."""
    content = dataset_service.read_upload(file.file, declared_bytes=int(request.headers.get("content-length") or 0),
                                          max_bytes=settings.max_upload_bytes)
    dataset = dataset_service.store_dataset(session=session, team=auth.team, user=auth.user, name=name,
                                            content=content, artifact_dir=settings.artifacts, filename=file.filename)
    return DatasetPublic.model_validate(dataset)


@router.post("/hub", status_code=status.HTTP_201_CREATED, responses=errors(409))
def register_hub_dataset(
    body: DatasetHubCreate, request: Request, auth: MemberAuth, session: SessionDep, settings: SettingsDep
) -> DatasetPublic:
    """Register one split of a Hub dataset (id + revision + split): `downloading`, then `ready` with its rows
    (validated like an upload) or `failed` with the reason (the file, row and column of a bad row; the splits found
    when the split has no files); poll GET /datasets/{id} (member)."""
    dataset = dataset_service.register_hub_dataset(
        session=session, team=auth.team, user=auth.user, name=body.name, hub_id=body.hub_id, revision=body.revision,
        split=body.split, artifact_dir=settings.artifacts,
    )
    session.commit()
    dataset_hub.start_import(request.app.state.session_factory, dataset.id, settings)
    return DatasetPublic.model_validate(dataset)


@router.get("/{dataset_id}")
def get_dataset(dataset_id: IdPath, auth: ViewerAuth, session: SessionDep) -> DatasetPublic:
    """One dataset."""
    dataset = dataset_service.get_dataset(session=session, team=auth.team, dataset_id=dataset_id)
    return DatasetPublic.model_validate(dataset)


@router.get("/{dataset_id}/rows")
def dataset_rows(
    dataset_id: IdPath,
    auth: ViewerAuth,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> Page[dict[str, Any]]:
    """A page of the dataset's rows; `count` is the dataset's row count."""
    dataset = dataset_service.get_dataset(session=session, team=auth.team, dataset_id=dataset_id)
    dataset_service.require_ready(dataset, ("path", "dataset_id"))
    return Page(data=dataset_service.read_rows(dataset, limit=limit, offset=offset), count=dataset.row_count)


@router.get("/{dataset_id}/preview")
def preview_dataset(
    dataset_id: IdPath,
    model: Annotated[str, Query(min_length=1, max_length=200, description="a ready model of the team")],
    auth: ViewerAuth,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=50)] = 5,
    system_prompt: Annotated[str | None, Query(max_length=20_000)] = None,
) -> DatasetPreview:
    """The first rows as `model` sees them (chat rows rendered with its chat template) and the histogram of every
    row's prompt length in its tokens."""
    dataset = dataset_service.get_dataset(session=session, team=auth.team, dataset_id=dataset_id)
    dataset_service.require_ready(dataset, ("path", "dataset_id"))
    found = model_service.find_model(session=session, team_id=auth.team.id, name=model)
    if found is None or found.state != "ready":
        state = "not registered" if found is None else found.state
        raise InvalidInput(f"model {model!r} is {state}: preview needs a ready model", loc=("query", "model"))
    rows = dataset_service.read_rows(dataset, limit=chat_preview.MAX_HISTOGRAM_ROWS, offset=0)
    return DatasetPreview.model_validate(chat_preview.preview(rows, Path(found.path), shown=limit,
                                                              system_prompt=system_prompt))
