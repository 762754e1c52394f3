"""The current team's experiment-tracker connections (MLflow, W&B; secrets write-only) and a job's tracker runs."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from backend.api.deps import AdminAuth, SessionDep, SettingsDep, ViewedJob, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.common import Page
from backend.schemas.trackers import TrackerCredentialsPublic, TrackerCredentialsUpdate, TrackerKind, TrackerRunPublic
from backend.services import trackers as tracker_service

router = APIRouter(tags=["trackers"], responses=errors(*AUTHENTICATED))


@router.get("/trackers")
def list_trackers(auth: ViewerAuth, session: SessionDep) -> Page[TrackerCredentialsPublic]:
    """The team's tracker connections: URLs and names shown, each secret only as set / not set."""
    rows = tracker_service.list_credentials(session=session, team=auth.team)
    return Page(data=[tracker_service.public(row) for row in rows], count=len(rows))


@router.put("/trackers/{kind}")
def set_tracker(kind: TrackerKind, body: TrackerCredentialsUpdate, auth: AdminAuth, session: SessionDep,
                settings: SettingsDep) -> TrackerCredentialsPublic:
    """Create or change the team's connection to a tracker (admin); omitted secrets are kept, "" clears one, and a
    new server URL (`tracking_uri`, `base_url`) drops the stored secrets not given with it. The URL must pass the
    platform's egress policy (no loopback, private or link-local hosts unless the operator allows them)."""
    row = tracker_service.set_credentials(session=session, team=auth.team, kind=kind, body=body, settings=settings)
    session.commit()
    return tracker_service.public(row)


@router.delete("/trackers/{kind}", status_code=status.HTTP_204_NO_CONTENT)
def delete_tracker(kind: TrackerKind, auth: AdminAuth, session: SessionDep) -> Response:
    """Forget the team's connection to a tracker (admin); running jobs' runs on it stop being fed."""
    tracker_service.delete_credentials(session=session, team=auth.team, kind=kind)
    session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/jobs/{job_id}/trackers")
def job_trackers(job: ViewedJob, session: SessionDep) -> Page[TrackerRunPublic]:
    """The job's tracker runs: run id, iterations sent, and whether the tracker is down (metrics buffered)."""
    runs = tracker_service.job_runs(session=session, job=job)
    return Page(data=[TrackerRunPublic(tracker=r.tracker, run_ref=r.run_ref, sent_iteration=r.sent_iteration,
                                       finished=r.finished, down_since=r.down_since, last_error=r.last_error)
                      for r in runs], count=len(runs))
