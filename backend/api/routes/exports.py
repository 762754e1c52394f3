"""Downloads: metrics (CSV, JSON), events (JSONL) and a checkpoint's HF directory as a streamed tar; team-scoped."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse, StreamingResponse
from sqlalchemy import select

from backend.api.deps import IdPath, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.db.models import Checkpoint, Iteration, JobEvent
from backend.schemas.jobs import IterationPublic
from backend.services.errors import NotFound, StoreUnavailable, not_found
from backend.services.exports import (
    CheckpointForm,
    checkpoint_dir,
    events_jsonl,
    export_root,
    metrics_csv,
    tar_stream,
)
from backend.services.jobs import get_job
from contract.artifact_store import ArtifactStoreError, artifact_store, checkpoint_key
from contract.artifact_store.checkpoints import stored_checkpoint

SHARE_URL_S = 3600  # a presigned URL's life
router = APIRouter(prefix="/jobs/{job_id}/export", tags=["exports"], responses=errors(*AUTHENTICATED))


def _attachment(filename: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


def _iterations(session: SessionDep, job_id: int) -> list[Iteration]:
    query = select(Iteration).where(Iteration.job_id == job_id).order_by(Iteration.iteration)
    return list(session.scalars(query))


@router.get(
    "/metrics.csv",
    responses={200: {"content": {"text/csv": {}}, "description": "one row per iteration, one column per metric"}},
)
def metrics_csv_export(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> PlainTextResponse:
    """Every iteration's metrics as CSV: iteration, created_at, then the metric keys sorted."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    body = metrics_csv(_iterations(session, job.id))
    return PlainTextResponse(body, media_type="text/csv", headers=_attachment(f"job-{job.id}-metrics.csv"))


@router.get("/metrics.json")
def metrics_json_export(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> list[IterationPublic]:
    """Every iteration's metrics as a JSON array (the same objects as GET /jobs/{id}/iterations)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    return [IterationPublic.model_validate(row) for row in _iterations(session, job.id)]


@router.get(
    "/events.jsonl",
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "one JSON event per line"}},
)
def events_export(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> PlainTextResponse:
    """The job's events, oldest first, one JSON object per line."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    events = list(session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id)))
    headers = _attachment(f"job-{job.id}-events.jsonl")
    return PlainTextResponse(events_jsonl(events), media_type="application/x-ndjson", headers=headers)


@router.get(
    "/checkpoints/{iteration}.tar",
    responses={200: {"content": {"application/x-tar": {}}, "description": "the checkpoint's HF directory"}},
)
def checkpoint_export(
    job_id: IdPath, iteration: IdPath, auth: ViewerAuth, session: SessionDep, settings: SettingsDep,
    form: Annotated[CheckpointForm, Query(description="checkpoint: the whole directory (resumable); merged: the "
                                          "model alone in HF layout (a LoRA job's merged with its adapter); "
                                          "adapter: a LoRA job's adapter alone (PEFT layout)")] = "checkpoint",
) -> StreamingResponse:
    """The checkpoint saved at `iteration` as an uncompressed tar of its HF directory (or of the `form` asked),
    streamed."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.iteration == iteration))
    if row is None:
        raise not_found("checkpoint of iteration", iteration)
    directory = checkpoint_dir(row.path, settings.artifacts)
    if directory is None:  # written on a worker host: streamed from the object store, if there is one
        try:
            directory = stored_checkpoint(job.team_id, job.id, iteration, settings.artifacts)
        except ArtifactStoreError as err:
            raise StoreUnavailable(f"checkpoint of iteration {iteration}: {err}") from err
    if directory is None:
        raise NotFound(f"checkpoint of iteration {iteration}: its files ({row.path}) are not on this server")
    chosen = export_root(directory, form)
    if chosen is None:
        raise NotFound(f"checkpoint of iteration {iteration} holds no LoRA adapter: job {job.id} trained every "
                       "weight (export form 'merged' or 'checkpoint')")
    root, members = chosen
    name = f"job-{job.id}-iter-{iteration}" + ("" if form == "checkpoint" else f"-{form}")
    return StreamingResponse(
        tar_stream(root, name, members), media_type="application/x-tar", headers=_attachment(f"{name}.tar")
    )


def _checkpoint_files(session: SessionDep, settings: SettingsDep, auth: ViewerAuth, job_id: int, iteration: int
                      ) -> tuple[Path | None, str | None, dict[str, int]]:
    """(the checkpoint's directory on this server or None, its key in the store or None, its files' sizes)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    row = session.scalar(select(Checkpoint).where(Checkpoint.job_id == job.id, Checkpoint.iteration == iteration))
    if row is None:
        raise not_found("checkpoint of iteration", iteration)
    directory = checkpoint_dir(row.path, settings.artifacts)
    if directory is not None:
        files = {p.relative_to(directory).as_posix(): p.stat().st_size for p in directory.rglob("*") if p.is_file()}
        return directory, None, files
    key = checkpoint_key(job.team_id, job.id, f"iter_{iteration:06d}")
    try:
        store = artifact_store(settings.artifacts)
        manifest = None if store is None else store.manifest(key)
    except ArtifactStoreError as err:
        raise StoreUnavailable(f"checkpoint of iteration {iteration}: {err}") from err
    if manifest is None:
        raise NotFound(f"checkpoint of iteration {iteration}: its files ({row.path}) are not on this server")
    return None, key, {path: size for path, (_, size) in manifest.files.items()}


@router.get("/checkpoints/{iteration}/files")
def checkpoint_files(job_id: IdPath, iteration: IdPath, auth: ViewerAuth, session: SessionDep,
                     settings: SettingsDep) -> dict[str, int]:
    """The checkpoint's files (relative path -> bytes), each downloadable from `.../files/{path}`."""
    return dict(sorted(_checkpoint_files(session, settings, auth, job_id, iteration)[2].items()))


@router.get(
    "/checkpoints/{iteration}/files/{path:path}",
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the file, streamed"},
               307: {"description": "a presigned URL of the object store (STREAMRL_ARTIFACTS=s3://...), valid 1 h"}},
)
def checkpoint_file(job_id: IdPath, iteration: IdPath, path: str, auth: ViewerAuth, session: SessionDep,
                    settings: SettingsDep) -> Response:
    """One file of the checkpoint: a redirect to a presigned URL when the object store holds it (the bytes never pass
    through the API), else streamed from this server's disk."""
    directory, key, files = _checkpoint_files(session, settings, auth, job_id, iteration)
    if path not in files:
        raise NotFound(f"checkpoint of iteration {iteration} has no file {path!r}")
    if directory is not None:
        return FileResponse(directory / path, media_type="application/octet-stream",
                            filename=path.rsplit("/", 1)[-1])
    store = artifact_store(settings.artifacts)
    assert store is not None and key is not None
    url = store.share_url(f"{key}/{path}", expires_s=SHARE_URL_S)
    if url is not None:
        return RedirectResponse(url, status_code=307)
    local = stored_checkpoint(auth.team.id, job_id, iteration, settings.artifacts)  # a directory store: streamed
    if local is None:
        raise NotFound(f"checkpoint of iteration {iteration}: gone from the store")
    return FileResponse(local / path, media_type="application/octet-stream", filename=path.rsplit("/", 1)[-1])
