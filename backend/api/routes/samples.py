"""The same prompt's samples side by side across the team's runs and checkpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from backend.api.deps import SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.common import MAX_ID
from backend.schemas.samples import PromptSamplesPublic, PromptsPublic
from backend.services import sample_compare
from backend.services.errors import InvalidInput

router = APIRouter(prefix="/samples", tags=["samples"], responses=errors(*AUTHENTICATED))

JobIds = Annotated[
    str, Query(pattern=r"^[0-9]{1,10}(,[0-9]{1,10}){0,7}$", description="1-8 of the team's job ids: 3,7")
]


def _ids(job_ids: str) -> list[int]:
    ids = [int(part) for part in job_ids.split(",")]
    if any(not 1 <= job_id <= MAX_ID for job_id in ids):
        raise InvalidInput(f"job ids are 1..{MAX_ID}", loc=("query", "job_ids"))
    return ids


@router.get("/prompts", responses=errors(404))
def list_prompts(
    job_ids: JobIds,
    auth: ViewerAuth,
    session: SessionDep,
    q: Annotated[str | None, Query(min_length=1, max_length=200, description="text in the prompt")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> PromptsPublic:
    """Prompts these jobs have samples of, those in most runs and iterations first (404 for another team's job)."""
    return sample_compare.shared_prompts(session=session, team=auth.team, job_ids=_ids(job_ids), query=q, limit=limit)


@router.get("/by-prompt", responses=errors(404))
def samples_by_prompt(
    job_ids: JobIds,
    auth: ViewerAuth,
    session: SessionDep,
    prompt: Annotated[str, Query(min_length=1, max_length=20_000, description="the prompt text, exactly")],
) -> PromptSamplesPublic:
    """One prompt's samples in these jobs, grouped by job and iteration, checkpoints marked (404 for another
    team's job)."""
    return sample_compare.prompt_samples(session=session, team=auth.team, job_ids=_ids(job_ids), prompt=prompt)
