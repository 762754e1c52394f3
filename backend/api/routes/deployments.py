"""Deployments (docs/openai.md#deployments): a base model with the team's adapters served on /openai/v1 by replicas
that scale between min_replicas and max_replicas. Another team's deployment: 404."""

from __future__ import annotations

from fastapi import APIRouter, Response

from backend.api.deps import IdPath, MemberAuth, RedisDep, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.db.models import Deployment
from backend.schemas.deployments import (
    DeploymentCreate,
    DeploymentMetrics,
    DeploymentPromote,
    DeploymentPublic,
    DeploymentUpdate,
    ReplicaPublic,
)
from backend.services import deployment_metrics
from backend.services import deployments as svc

router = APIRouter(prefix="/deployments", tags=["deployments"], responses=errors(*AUTHENTICATED))


def _public(row: Deployment, client: RedisDep) -> DeploymentPublic:
    public = DeploymentPublic.model_validate(row)
    public.replicas = [ReplicaPublic.model_validate(r) for r in svc.replicas(client, row.id)]
    public.metrics = DeploymentMetrics.model_validate(deployment_metrics.metrics(client, row.id))
    return public


@router.post("", status_code=201, responses=errors(409, 422))
def create_deployment(body: DeploymentCreate, auth: MemberAuth, session: SessionDep,
                      client: RedisDep) -> DeploymentPublic:
    """Create a deployment. A base model or adapter that is not the team's LoRA adapter over it: 422 naming the
    field; a name in use (a deployment or a registered model): 409."""
    row = svc.create(session, client, auth.team, name=body.name, base_model=body.base_model, adapters=body.adapters,
                     min_replicas=body.min_replicas, max_replicas=body.max_replicas, idle_s=body.idle_s)
    return _public(row, client)


@router.get("")
def list_deployments(auth: ViewerAuth, session: SessionDep, client: RedisDep) -> list[DeploymentPublic]:
    """The team's deployments with their replicas and metrics (requests/s, p50/p99 latency, tokens/s)."""
    return [_public(row, client) for row in svc.list_for(session, auth.team)]


@router.post("/promote", responses=errors(409, 422))
def promote_checkpoint(body: DeploymentPromote, auth: MemberAuth, session: SessionDep,
                       client: RedisDep) -> DeploymentPublic:
    """Serve a checkpoint as the first adapter of deployment `name` (created over `base_model` if missing)."""
    row = svc.promote(session, client, auth.team, adapter=body.adapter, name=body.name, base_model=body.base_model)
    return _public(row, client)


@router.get("/{deployment_id}")
def get_deployment(deployment_id: IdPath, auth: ViewerAuth, session: SessionDep, client: RedisDep) -> DeploymentPublic:
    return _public(svc.get(session, auth.team, deployment_id), client)


@router.patch("/{deployment_id}", responses=errors(409, 422))
def update_deployment(deployment_id: IdPath, body: DeploymentUpdate, auth: MemberAuth, session: SessionDep,
                      client: RedisDep) -> DeploymentPublic:
    """Change fields; new adapters or base model restart the replicas (each finishes what it serves first)."""
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    return _public(svc.update(session, client, auth.team, deployment_id, changes), client)


@router.delete("/{deployment_id}", status_code=204)
def delete_deployment(deployment_id: IdPath, auth: MemberAuth, session: SessionDep, client: RedisDep) -> Response:
    """Delete it; its replicas stop once idle."""
    svc.delete(session, client, auth.team, deployment_id)
    return Response(status_code=204)
