"""The scheduler's queue: every waiting job and session in order, the caller's own in full, other teams' anonymous."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import OptionalRedisDep, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.queue import QueueListing
from backend.services.queue_view import queue_listing

router = APIRouter(tags=["queue"], responses=errors(*AUTHENTICATED))


@router.get("/queue")
def get_queue(auth: ViewerAuth, session: SessionDep, redis: OptionalRedisDep) -> QueueListing:
    """Waiting items by position with their reason, ETA and slots asked for, and the queue grouped by team and
    priority; another team's items carry no job id, name or team name."""
    return queue_listing(session=session, client=redis, team=auth.team)
