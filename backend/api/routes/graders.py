"""Grader test bench: run a reward spec on one sample before submitting a job (as OpenAI's graders/run)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from backend.api.deps import OptionalRedisDep, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.common import ErrorBody
from backend.schemas.graders import GraderRunRequest, GraderRunResult
from backend.services.errors import InvalidInput
from backend.services.graders import run_grader

router = APIRouter(prefix="/graders", tags=["graders"], responses=errors(*AUTHENTICATED))
TIMED_OUT: dict[int | str, dict[str, Any]] = {
    504: {"model": ErrorBody, "description": "No generation worker ran the model-backed grader in time"}}


@router.post("/run", responses=TIMED_OUT)
def run_grader_on_sample(body: GraderRunRequest, auth: ViewerAuth, session: SessionDep,
                         client: OptionalRedisDep) -> GraderRunResult:
    """Score `sample.output_text` against `item` with `grader`: the score, multi's sub-scores, pass/fail where a
    pass_threshold is declared, and the per-sample error if any. An invalid spec is a 422 at `body.grader` (a model
    the team cannot use: at its field). Specs with `model` or `judge` graders run on the generation pool (503 when
    no generation worker is registered, 504 when none answered in time); the rest run here."""
    try:  # a sync endpoint: FastAPI runs it in its threadpool (bleu/rouge are CPU work, the pool is waited on)
        return run_grader(body, session=session, team_id=auth.team.id, client=client)
    except ValueError as exc:
        raise InvalidInput(str(exc), loc=("body", "grader")) from exc
