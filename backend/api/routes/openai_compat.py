"""OpenAI's fine-tuning API under `/openai/v1` (files, fine_tuning.jobs with events and checkpoints), for the
unchanged `openai` SDK pointed at the platform with `base_url` and a platform API key. Mapping: docs/openai.md and
backend/services/openai_compat.py. Every error, authentication and validation included, is OpenAI's envelope
`{"error": {"message", "type", "param", "code"}}`, so the SDK raises its typed errors. Not in the platform's OpenAPI
schema (the dashboard's generated client does not see it)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Literal

import redis
from fastapi import APIRouter, Depends, Form, Query, Request, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.api.deps import MemberAuth, OptionalRedisDep, SessionDep, SettingsDep, ViewerAuth, reject_unknown_query
from backend.api.presenters import job_public
from backend.db.models import Job, JobEvent
from backend.schemas.jobs import JobEventPublic
from backend.schemas.openai_compat import FineTuningJobCreate
from backend.services import datasets as dataset_service
from backend.services import jobs as job_service
from backend.services import openai_compat as compat
from backend.services.errors import InvalidInput, QuotaExceeded, ServiceError, Unauthorized
from backend.services.live import publish_live, wake_controller

PREFIX = "/openai/v1"
CODES = {401: "invalid_api_key", 403: "permission_denied", 404: "not_found", 409: "conflict", 413: "file_too_large",
         429: "rate_limit_exceeded"}
TYPES = {401: "invalid_request_error", 403: "permission_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def error_body(status_code: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = TYPES.get(status_code, "server_error" if status_code >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code or CODES.get(status_code)}}


def _param(loc: Any) -> str | None:
    parts = [str(part) for part in loc]
    if parts and parts[0] in ("body", "query", "path", "form"):
        parts = parts[1:]
    return ".".join(parts) or None


def openai_error(exc: Exception) -> JSONResponse | None:
    """OpenAI's answer to an error a route raised, or None for a bug (left to the server's 500)."""
    headers = {"x-should-retry": "false"}
    if isinstance(exc, compat.OpenAIError):
        status_code, body = exc.status_code, error_body(exc.status_code, exc.detail, param=exc.param, code=exc.code)
    elif isinstance(exc, InvalidInput):
        status_code, body = 400, error_body(400, exc.detail, param=_param(exc.loc))
    elif isinstance(exc, QuotaExceeded):
        status_code = exc.status_code
        body = error_body(status_code, exc.detail, param=str(exc.extra.get("quota")), code="quota_exceeded")
    elif isinstance(exc, ServiceError):
        status_code = exc.status_code
        code = "invalid_state" if "current_status" in exc.extra else None
        body = error_body(status_code, exc.detail, code=code)
        headers.update(exc.headers)
        if isinstance(exc, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
    elif isinstance(exc, RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        param = _param(first.get("loc", ()))
        message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
        status_code, body = 400, error_body(400, message, param=param)
    elif isinstance(exc, StarletteHTTPException):
        status_code, body = exc.status_code, error_body(exc.status_code, str(exc.detail))
    elif isinstance(exc, IntegrityError):
        status_code, body = 409, error_body(409, "conflicts with an existing object (retry the request)")
        headers = {}
    elif isinstance(exc, OperationalError | InterfaceError | redis.ConnectionError | redis.TimeoutError):
        status_code, body = 503, error_body(503, "the database or Redis is unavailable right now; retry shortly")
        headers = {"Retry-After": "5"}
    else:
        return None
    return JSONResponse(body, status_code=status_code, headers=headers)


class OpenAIRoute(APIRoute):
    """A route whose errors (dependencies and body validation included) answer in OpenAI's envelope."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                response = openai_error(exc)
                if response is None:
                    raise
                return response

        return answer


router = APIRouter(route_class=OpenAIRoute, include_in_schema=False, dependencies=[Depends(reject_unknown_query)])
JobLimit = Annotated[int, Query(ge=1, le=100)]
Cursor = Annotated[str | None, Query(max_length=64)]


def _publish(session: Session, client: redis.Redis | None, job: Job, since_event_id: int) -> None:
    """After a commit: wake the controller and tell the dashboard's live viewers (as POST /api/v1/jobs does)."""
    wake_controller(client)
    publish_live(client, job.id, "status", job_public(session, job).model_dump(mode="json"))
    events = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.id > since_event_id)
                             .order_by(JobEvent.id))
    for event in events:
        publish_live(client, job.id, "event", JobEventPublic.model_validate(event).model_dump(mode="json"))


def _last_event_id(session: Session, job_id: int) -> int:
    return session.scalar(select(JobEvent.id).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
                          .limit(1)) or 0


# -- files ------------------------------------------------------------------------------------------------------------
@router.post("/files")
def create_file(
    request: Request,
    file: UploadFile,
    purpose: Annotated[str, Form(max_length=100)],
    auth: MemberAuth,
    session: SessionDep,
    settings: SettingsDep,
    expires_anchor: Annotated[str | None, Form(alias="expires_after[anchor]", max_length=100)] = None,
    expires_seconds: Annotated[str | None, Form(alias="expires_after[seconds]", max_length=100)] = None,
) -> dict[str, Any]:
    """A JSONL file of chat rows (`{"messages": [...]}`, other columns reach the grader as `item`) as a dataset."""
    if purpose != "fine-tune":
        raise compat.OpenAIError(f"purpose {purpose[:100]!r} is not supported: this platform stores fine-tuning "
                                 "files only (purpose 'fine-tune')", param="purpose")
    if expires_anchor is not None or expires_seconds is not None:
        raise compat.OpenAIError("expires_after is not supported: files stay until deleted", param="expires_after")
    content = dataset_service.read_upload(file.file, declared_bytes=int(request.headers.get("content-length") or 0),
                                          max_bytes=settings.max_upload_bytes)
    dataset = dataset_service.store_dataset(session=session, team=auth.team, user=auth.user,
                                            name=(file.filename or "upload.jsonl")[-200:], content=content,
                                            artifact_dir=settings.artifacts, filename=file.filename)
    return compat.file_object(dataset)


@router.get("/files")
def list_files(
    auth: ViewerAuth,
    session: SessionDep,
    after: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Literal["asc", "desc"] = "desc",
    purpose: Annotated[str | None, Query(max_length=100)] = None,
) -> dict[str, Any]:
    if purpose is not None and purpose != "fine-tune":
        return compat.page([], limit)
    return compat.list_files(session, auth.team, after=after, limit=limit, ascending=order == "asc")


@router.get("/files/{file_id}")
def retrieve_file(file_id: str, auth: ViewerAuth, session: SessionDep) -> dict[str, Any]:
    return compat.file_object(compat.get_file(session, auth.team, file_id))


@router.delete("/files/{file_id}")
def delete_file(file_id: str, auth: MemberAuth, session: SessionDep) -> dict[str, Any]:
    dataset = compat.get_file(session, auth.team, file_id)
    path = compat.delete_file(session, auth.team, dataset)
    session.commit()
    if path is not None:
        path.unlink(missing_ok=True)
    return {"id": file_id, "object": "file", "deleted": True}


@router.get("/files/{file_id}/content")
def file_content(file_id: str, auth: ViewerAuth, session: SessionDep) -> Response:
    dataset = compat.get_file(session, auth.team, file_id)
    dataset_service.require_ready(dataset, ("path", "file_id"))
    return FileResponse(dataset.storage_path, media_type="application/octet-stream")


# -- fine-tuning jobs -------------------------------------------------------------------------------------------------
@router.post("/fine_tuning/jobs")
def create_job(body: FineTuningJobCreate, auth: MemberAuth, session: SessionDep,
               client: OptionalRedisDep) -> dict[str, Any]:
    job, marker = compat.create_job(session, auth.team, auth.user, body)
    job.created_by_key_id = auth.api_key.id if auth.api_key else None  # its usage is reported under the key
    session.commit()
    _publish(session, client, job, since_event_id=0)
    return compat.job_object(job, marker, auth.team, None)


@router.get("/fine_tuning/jobs")
def list_jobs(auth: ViewerAuth, session: SessionDep, after: Cursor = None, limit: JobLimit = 20) -> dict[str, Any]:
    return compat.list_jobs(session, auth.team, after=after, limit=limit)


@router.get("/fine_tuning/jobs/{job_id}")
def retrieve_job(job_id: str, auth: ViewerAuth, session: SessionDep) -> dict[str, Any]:
    job, marker = compat.get_job(session, auth.team, job_id)
    return compat.job_object(job, marker, auth.team, compat.trained_tokens(session, job))


def _act(job_id: str, auth: MemberAuth, session: Session, client: redis.Redis | None,
         action: Callable[[Job], object]) -> dict[str, Any]:
    job, marker = compat.get_job(session, auth.team, job_id)
    since = _last_event_id(session, job.id)
    action(job)
    session.commit()
    _publish(session, client, job, since)
    return compat.job_object(job, marker, auth.team, compat.trained_tokens(session, job))


@router.post("/fine_tuning/jobs/{job_id}/cancel")
def cancel_job(job_id: str, auth: MemberAuth, session: SessionDep, client: OptionalRedisDep) -> dict[str, Any]:
    return _act(job_id, auth, session, client, lambda job: job_service.cancel_job(session=session, job=job))


@router.post("/fine_tuning/jobs/{job_id}/pause")
def pause_job(job_id: str, auth: MemberAuth, session: SessionDep, client: OptionalRedisDep) -> dict[str, Any]:
    def pause(job: Job) -> None:
        compat.require_fine_tunable(job, "pause")
        job_service.pause_job(session=session, job=job)

    return _act(job_id, auth, session, client, pause)


@router.post("/fine_tuning/jobs/{job_id}/resume")
def resume_job(job_id: str, auth: MemberAuth, session: SessionDep, client: OptionalRedisDep) -> dict[str, Any]:
    def resume(job: Job) -> None:
        compat.require_fine_tunable(job, "resume")
        job_service.resume_job(session=session, team=auth.team, job=job)

    return _act(job_id, auth, session, client, resume)


@router.get("/fine_tuning/jobs/{job_id}/events")
def list_events(job_id: str, auth: ViewerAuth, session: SessionDep, after: Cursor = None,
                limit: JobLimit = 20) -> dict[str, Any]:
    job, _ = compat.get_job(session, auth.team, job_id)
    return compat.list_events(session, job, after=after, limit=limit)


@router.get("/fine_tuning/jobs/{job_id}/checkpoints")
def list_checkpoints(job_id: str, auth: ViewerAuth, session: SessionDep, after: Cursor = None,
                     limit: JobLimit = 10) -> dict[str, Any]:
    job, marker = compat.get_job(session, auth.team, job_id)
    return compat.list_checkpoints(session, job, marker, auth.team, after=after, limit=limit)

