"""What a job recorded: events, iterations, samples, timeline and checkpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from backend.api.deps import IdPath, SessionDep, SettingsDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.common import MAX_ID, Page
from backend.schemas.jobs import (
    CheckpointPublic,
    IterationPublic,
    JobEventPublic,
    SamplePublic,
    SampleTokensPublic,
    SpanPublic,
    TimelinePublic,
)
from backend.schemas.usage import JobEstimatePublic, UsageFigures
from backend.services import job_data, job_eta, json_pages
from backend.services.errors import StoreUnavailable, not_found
from backend.services.jobs import get_job
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.checkpoints import stored_iterations

router = APIRouter(prefix="/jobs/{job_id}", tags=["jobs"], responses=errors(*AUTHENTICATED))


@router.get("/events")
def list_events(
    job_id: IdPath,
    auth: ViewerAuth,
    session: SessionDep,
    after_id: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> Page[JobEventPublic]:
    """The job's typed log, oldest first, after event `after_id` (for polling / `logs --follow`)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)  # after the query checks: 422 before 404
    events = job_data.list_events(session=session, job_id=job.id, after_id=after_id, limit=limit)
    return page_of(JobEventPublic, events)


@router.get("/iterations", response_model=Page[IterationPublic])
def list_iterations(
    job_id: IdPath,
    auth: ViewerAuth,
    session: SessionDep,
    after: Annotated[int, Query(ge=-1, le=MAX_ID)] = -1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> Response:
    """Per-iteration metrics after iteration `after`."""
    page = json_pages.iterations_page(session=session, team_id=auth.team.id, job_id=job_id, after=after, limit=limit)
    if page is None:  # after the query checks: 422 before 404
        raise not_found("job", job_id)
    return Response(page, media_type="application/json")


@router.get("/samples", response_model=Page[SamplePublic])
def list_samples(
    job_id: IdPath,
    auth: ViewerAuth,
    session: SessionDep,
    iteration: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    min_reward: Annotated[float | None, Query(ge=-1e9, le=1e9)] = None,
    max_reward: Annotated[float | None, Query(ge=-1e9, le=1e9)] = None,
    min_length: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    max_length: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    policy_version: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    min_staleness: Annotated[int | None, Query(ge=0, le=MAX_ID, description="versions behind the trainer")] = None,
    max_staleness: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    min_mismatch: Annotated[float | None, Query(ge=0, le=1e9, description="the sample's mean k3 mismatch")] = None,
) -> Response:
    """Recent finished samples (newest first), optionally of one iteration and within the trajectory explorer's
    filters (reward, length, policy version, staleness, mismatch)."""
    filters = {"min_reward": min_reward, "max_reward": max_reward, "min_length": min_length,
               "max_length": max_length, "policy_version": policy_version, "min_staleness": min_staleness,
               "max_staleness": max_staleness, "min_mismatch": min_mismatch}
    page = json_pages.samples_page(session=session, team=auth.team, job_id=job_id, iteration=iteration, limit=limit,
                                   filters=filters)
    if page is None:  # after the query checks: 422 before 404
        raise not_found("job", job_id)
    return Response(page, media_type="application/json")


@router.get("/samples/{sample_id}/tokens")
def sample_tokens(
    job_id: IdPath, sample_id: Annotated[str, Path(min_length=1, max_length=200)], auth: ViewerAuth,
    session: SessionDep,
) -> SampleTokensPublic:
    """A stored sample's per-token record (the trajectory explorer): behaviour and trainer logprobs, versions,
    advantage, loss mask. 404 when the sample is not stored or was stored without one (e.g. before this record)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)  # after the query checks: 422 before 404
    sample = job_data.get_sample(session=session, job_id=job.id, sample_id=sample_id)
    if sample is None or sample.tokens is None:
        raise not_found("sample tokens", sample_id)
    return SampleTokensPublic.model_validate({**sample.tokens, "sample_id": sample.sample_id,
                                              "iteration": sample.iteration, "reward": sample.reward,
                                              "reward_components": sample.reward_components,
                                              "mismatch": sample.mismatch})


@router.get("/timeline")
def timeline(
    job_id: IdPath,
    auth: ViewerAuth,
    session: SessionDep,
    since: Annotated[float, Query(ge=0, le=1e11, description="epoch seconds")] = 0.0,
) -> TimelinePublic:
    """Pipeline spans ending at or after `since` (epoch seconds)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)  # after the query checks: 422 before 404
    spans = job_data.list_spans(session=session, job_id=job.id, since=since)
    return TimelinePublic(spans=[SpanPublic.model_validate(s) for s in spans])


@router.get("/checkpoints")
def list_checkpoints(job_id: IdPath, auth: ViewerAuth, session: SessionDep, settings: SettingsDep
                     ) -> Page[CheckpointPublic]:
    """Saved checkpoints, oldest first: on this server's disk or complete in the artifact store (STREAMRL_ARTIFACTS;
    503 when the store does not answer)."""
    job = get_job(session=session, team=auth.team, job_id=job_id)  # after the query checks: 422 before 404
    try:
        stored = stored_iterations(job.team_id, job.id, settings.artifacts)
    except ArtifactStoreError as err:
        raise StoreUnavailable(f"checkpoints of job {job.id}: {err}") from err
    return page_of(CheckpointPublic, job_data.list_checkpoints(session=session, job_id=job.id, stored=stored))


@router.get("/eta")
def job_estimate(job_id: IdPath, auth: ViewerAuth, session: SessionDep) -> JobEstimatePublic:
    """ETA (remaining iterations x the recent iterations' median time) and cost (the job's usage records, the
    projection to its last iteration, the job's and the team's device budgets); backend/services/job_eta.py."""
    job = get_job(session=session, team=auth.team, job_id=job_id)
    found = job_eta.estimate(session, auth.team, job)
    values = {**found.__dict__, "usage": UsageFigures(**job_eta.figures(found.usage))}
    return JobEstimatePublic(**values)
