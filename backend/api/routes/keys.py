"""API keys of the current team."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from backend.api.deps import AdminAuth, IdPath, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.api.presenters import page_of
from backend.schemas.auth import ApiKeyCreate, ApiKeyCreated, ApiKeyPublic
from backend.schemas.common import Page
from backend.services import keys as key_service

router = APIRouter(prefix="/keys", tags=["keys"], responses=errors(*AUTHENTICATED))


@router.get("")
def list_keys(auth: ViewerAuth, session: SessionDep) -> Page[ApiKeyPublic]:
    """The team's keys (secrets are never shown again)."""
    return page_of(ApiKeyPublic, key_service.list_keys(session=session, team=auth.team))


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(409))
def create_key(body: ApiKeyCreate, auth: AdminAuth, session: SessionDep) -> ApiKeyCreated:
    """Create a key (admin); the answer holds the secret, shown this once."""
    key, secret = key_service.create_key(
        session=session, team=auth.team, creator=auth.user, name=body.name, scopes=body.scopes
    )
    session.commit()
    return ApiKeyCreated(**ApiKeyPublic.model_validate(key).model_dump(), secret=secret)


@router.delete("/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_key(key_id: IdPath, auth: AdminAuth, session: SessionDep) -> Response:
    """Revoke a key (admin); it is refused from the next request on and its open live streams close."""
    key_service.revoke_key(session=session, team=auth.team, key_id=key_id)
    session.commit()  # announced to every API process and live stream (backend/api/auth_cache.py)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
