"""The cluster page's read model: workers by pool and node, what holds their slots, pending instances, queues."""

from __future__ import annotations

from fastapi import APIRouter

from backend.api.deps import RedisDep, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.cluster import ClusterPublic
from backend.services.cluster import cluster_view

router = APIRouter(tags=["cluster"], responses=errors(*AUTHENTICATED))


@router.get("/cluster")
def get_cluster(auth: ViewerAuth, session: SessionDep, redis: RedisDep) -> ClusterPublic:
    """Workers (slots, device sets, the tasks holding them, CPU/memory/GPU samples), pools with queue depths, and the
    team's pending instances with the reason they wait; another team's tasks are shown without id or name."""
    return cluster_view(session=session, client=redis, team=auth.team)
