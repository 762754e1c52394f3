"""Evaluation suites on demand (docs/user-guide.md#evaluation-suites): POST to run one, GET to read it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from backend.api.deps import IdPath, MemberAuth, RedisDep, SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.schemas.evaluations import EvaluationCreate, EvaluationDetail, EvaluationPublic, EvaluationRow
from backend.services import evaluations as svc

router = APIRouter(prefix="/evaluations", tags=["evaluations"], responses=errors(*AUTHENTICATED))


@router.post("", status_code=202)
def create_evaluation(body: EvaluationCreate, auth: MemberAuth, session: SessionDep,
                      client: RedisDep) -> EvaluationPublic:
    """Queue an evaluation (`{id, status}`); it runs on a generation slot. A model or job that is not the team's: 404;
    a suite that does not validate: 422 naming the field."""
    suite = body.suite if isinstance(body.suite, str) else body.suite.model_dump(mode="json")
    row = svc.create(session, client, auth.team, suite=suite, model=body.model, job_id=body.job_id,
                     checkpoint=body.checkpoint)
    return EvaluationPublic.model_validate(row)


@router.get("")
def list_evaluations(auth: ViewerAuth, session: SessionDep,
                     job_id: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None) -> list[EvaluationPublic]:
    """The team's evaluations, newest first (of one job with `job_id`)."""
    return [EvaluationPublic.model_validate(r) for r in svc.list_for(session, auth.team, job_id=job_id)]


@router.get("/{evaluation_id}")
def get_evaluation(evaluation_id: IdPath, auth: ViewerAuth, session: SessionDep) -> EvaluationDetail:
    """The evaluation: status, summary and per-row outputs and scores."""
    row = svc.get(session, auth.team, evaluation_id)
    public = EvaluationPublic.model_validate(row).model_dump()
    rows = [EvaluationRow.model_validate(r) for r in (row.rows or {}).get("rows", [])]
    return EvaluationDetail(**public, suite=row.suite, rows=rows)
