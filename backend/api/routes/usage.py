"""Usage of the caller's team: device-seconds and tokens by team, job, API key or day, as JSON or CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import select

from backend.api.deps import SessionDep, ViewerAuth
from backend.api.openapi import AUTHENTICATED, errors
from backend.db.models import ApiKey
from backend.schemas.common import MAX_ID
from backend.schemas.usage import TeamBudgetPublic, UsageFigures, UsagePublic, UsageRowPublic
from backend.services.errors import InvalidInput, not_found
from backend.services.jobs import get_job
from backend.services.usage import GroupBy, UsageTotals, month_start, team_month_totals, usage_rows

router = APIRouter(prefix="/usage", tags=["usage"], responses=errors(*AUTHENTICATED))
ISO_MOMENT = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$"
CSV_COLUMNS = ("group_by", "id", "name", "generation_device_seconds", "training_device_seconds", "device_seconds",
               "tokens_generated", "tokens_trained")


def _moment(text: str, name: str) -> datetime:
    """An ISO date or date-time (UTC unless it has an offset); 422 naming the query parameter otherwise."""
    try:
        moment = datetime.fromisoformat(text)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise InvalidInput(f"`{name}` is not a valid ISO date or time: {text!r}", loc=("query", name)) from None


def _figures(totals: UsageTotals) -> dict[str, float | int]:
    return {"generation_device_seconds": totals.generation_device_seconds,
            "training_device_seconds": totals.training_device_seconds, "device_seconds": totals.device_seconds,
            "tokens_generated": totals.tokens_generated, "tokens_trained": totals.tokens_trained}


CSV_ANSWER = {"content": {"text/csv": {}}, "description": "JSON, or CSV (one row per group) with format=csv or "
              "Accept: text/csv"}


@router.get("", response_model=UsagePublic, responses={200: CSV_ANSWER})
def get_usage(
    request: Request,
    auth: ViewerAuth,
    session: SessionDep,
    group_by: GroupBy = "team",
    start: Annotated[str | None, Query(alias="from", pattern=ISO_MOMENT, description="ISO date or time, inclusive "
                                       "(default: the start of this month, UTC; no offset: UTC)")] = None,
    end: Annotated[str | None, Query(alias="to", pattern=ISO_MOMENT, description="exclusive (default: now)")] = None,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this job's usage")] = None,
    key_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this API key's usage")] = None,
    output: Annotated[Literal["json", "csv"] | None, Query(alias="format", description="csv: text/csv (as Accept: "
                                                           "text/csv)")] = None,
) -> Response | UsagePublic:
    """The team's usage in [from, to): device-seconds per pool and tokens, grouped by `team`, `job`, `key` (API
    key) or `day`; the team's monthly budget beside it. Another team's job or key is 404."""
    now = datetime.now(UTC)
    begin = _moment(start, "from") if start else month_start(now)
    finish = _moment(end, "to") if end else now
    if begin >= finish:
        raise InvalidInput(f"`from` ({begin.isoformat()}) must be before `to` ({finish.isoformat()})",
                           loc=("query", "from"))
    if job_id is not None:
        get_job(session=session, team=auth.team, job_id=job_id)  # 404 for another team's
    if key_id is not None and session.scalar(select(ApiKey.id).where(ApiKey.id == key_id,
                                                                      ApiKey.team_id == auth.team.id)) is None:
        raise not_found("API key", key_id)
    rows = usage_rows(session=session, team=auth.team, group_by=group_by, start=begin, end=finish, job_id=job_id,
                      api_key_id=key_id)
    wants_csv = output == "csv" or (output is None and "text/csv" in request.headers.get("accept", ""))
    if wants_csv:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            figures = _figures(row.totals)
            writer.writerow([group_by, "" if row.id is None else row.id, row.name,
                             *(figures[name] for name in CSV_COLUMNS[3:])])
        filename = f"usage-{group_by}-{begin:%Y%m%d}-{finish:%Y%m%d}.csv"
        return Response(out.getvalue(), media_type="text/csv",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})
    total = UsageTotals(sum(r.totals.generation_device_seconds for r in rows),
                        sum(r.totals.training_device_seconds for r in rows),
                        sum(r.totals.tokens_generated for r in rows), sum(r.totals.tokens_trained for r in rows))
    month = team_month_totals(session, [auth.team.id], now).get(auth.team.id, UsageTotals())
    return UsagePublic(
        group_by=group_by, start=begin, end=finish,
        rows=[UsageRowPublic(id=row.id, name=row.name, **_figures(row.totals)) for row in rows],
        total=UsageFigures(**_figures(total)),
        budget=TeamBudgetPublic(max_device_hours_per_month=auth.team.max_device_hours_per_month,
                                used_device_hours_this_month=month.device_seconds / 3600.0,
                                month_start=month_start(now)),
    )
