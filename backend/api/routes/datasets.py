"""Prompt datasets of the current team (JSONL uploads)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, UploadFile, status

from backend.api.deps import IdPath, MemberAuth, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.assets import DatasetPublic
from backend.schemas.common import MAX_OFFSET, Page
from backend.services import datasets as dataset_service
from backend.services.errors import PayloadTooLarge

router = APIRouter(prefix="/datasets", tags=["datasets"], responses=errors(*AUTHENTICATED))
MULTIPART_OVERHEAD = 64 * 1024


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
    """Upload a JSONL file (one JSON object with a non-empty `prompt` per line); 422 names the first bad line."""
    declared = int(request.headers.get("content-length") or 0)
    if declared > settings.max_upload_bytes + MULTIPART_OVERHEAD:
        raise PayloadTooLarge(f"upload exceeds the limit of {settings.max_upload_bytes} bytes")
    content = dataset_service.read_limited(file.file, max_bytes=settings.max_upload_bytes)
    dataset = dataset_service.create_dataset(
        session=session, team=auth.team, user=auth.user, name=name, content=content, artifact_dir=settings.artifacts
    )
    try:
        session.commit()
    except BaseException:
        Path(dataset.storage_path).unlink(missing_ok=True)  # no file without its row
        raise
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
    return Page(data=dataset_service.read_rows(dataset, limit=limit, offset=offset), count=dataset.row_count)
