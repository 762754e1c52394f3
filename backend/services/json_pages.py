"""The two pages dashboards poll, written as JSON text without ORM objects, JSON decoding or pydantic models.

`GET /jobs` and `GET /jobs/{id}/iterations` are what every open dashboard asks for over and over; their rows hold
stored JSON (specs, metrics) that the ORM path decoded and pydantic re-encoded on every request. Here the stored
text is spliced in as it is. Each answer equals what its schema (`JobsPublic`, `Page[IterationPublic]`) serializes:
tests/api/test_json_pages.py and tests/api/test_iterations_json.py compare them on PostgreSQL and SQLite.

On PostgreSQL the iterations page is rendered by the database in one aggregate (no per-row Python at all); other
dialects splice row by row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Integer, Text, cast, func, select, text
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job, Team
from backend.services.job_data import iteration_rows, summary_columns
from backend.services.jobs import count_jobs, team_jobs_where
from backend.services.strict_json import finite_or_null
from contract.sharing import stored_spec_shares_generation, stored_spec_shares_training


def strict_json(stored: str) -> str:
    """Stored JSON text as strict JSON (rows written before `record_iteration` nulled non-finite numbers: SQLite)."""
    if "NaN" not in stored and "Infinity" not in stored:
        return stored
    return json.dumps(finite_or_null(json.loads(stored)))


def utc_text(moment: datetime) -> str:
    """The JSON form pydantic gives a `UtcDatetime` (naive values are UTC: SQLite)."""
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    iso = moment.isoformat()
    return (iso[:-6] if iso.endswith("+00:00") else iso) + "Z"


def _string(value: str | None) -> str:
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


def _moment(value: datetime | None) -> str:
    return "null" if value is None else f'"{utc_text(value)}"'


def _stored(value: str | None) -> str:
    return "null" if value is None else strict_json(value)


# -- GET /jobs/{id}/iterations ------------------------------------------------------------------------------------
def iterations_page_json(rows: Sequence[tuple[int, str, datetime]]) -> bytes:
    """`Page[IterationPublic]` from (iteration, stored metrics text, created_at) rows."""
    items = ",".join(
        f'{{"iteration":{int(it)},"metrics":{strict_json(stored)},"created_at":"{utc_text(created)}"}}'
        for it, stored, created in rows
    )
    return f'{{"data":[{items}],"count":{len(rows)}}}'.encode()


# PostgreSQL's json type keeps the text it was given (strict JSON: it refuses NaN), so `metrics::text` is what
# `record_iteration` wrote. The timestamp matches Python's isoformat: microseconds only when non-zero.
_PG_ITERATIONS_PAGE = text(r"""
WITH page AS (
    SELECT iteration, metrics, created_at AT TIME ZONE 'UTC' AS utc
    FROM iterations WHERE job_id = :job_id AND iteration > :after ORDER BY iteration LIMIT :limit
)
SELECT count(page.iteration), coalesce(string_agg(
    '{"iteration":' || page.iteration || ',"metrics":' || page.metrics::text || ',"created_at":"'
    || to_char(page.utc, 'YYYY-MM-DD"T"HH24\:MI\:SS')
    || CASE WHEN extract(microseconds FROM page.utc)::bigint % 1000000 = 0 THEN '' ELSE to_char(page.utc, '.US') END
    || 'Z"}', ',' ORDER BY page.iteration), '')
FROM jobs LEFT JOIN page ON true
WHERE jobs.id = :job_id AND jobs.team_id = :team_id
GROUP BY jobs.id
""")


def iterations_page(*, session: Session, team_id: int, job_id: int, after: int, limit: int) -> bytes | None:
    """The team's job's iterations after `after` as `Page[IterationPublic]` JSON; None when the job is not the
    team's. One query either way."""
    if session.get_bind().dialect.name == "postgresql":
        found = session.execute(
            _PG_ITERATIONS_PAGE, {"job_id": job_id, "team_id": team_id, "after": after, "limit": limit}
        ).first()
        if found is None:
            return None
        count, items = found
        return f'{{"data":[{items}],"count":{int(count)}}}'.encode()
    rows = iteration_rows(session=session, team_id=team_id, job_id=job_id, after=after, limit=limit)
    return None if rows is None else iterations_page_json(rows)


# -- GET /jobs ----------------------------------------------------------------------------------------------------
def _listing_columns() -> tuple[Any, ...]:
    """A job's `JobPublic` fields as plain columns: stored JSON as text, the total iterations read in SQL."""
    running, pending, latest, email = summary_columns()
    total_iterations = cast(Job.spec[("training", "iterations")].as_string(), Integer)
    return (
        Job.id, Job.name, Job.status, cast(Job.spec, Text), Job.target_instances, running, pending, Job.autoscale,
        Job.created_by_id, email, Job.created_at, Job.started_at, Job.finished_at, Job.error,
        Job.current_iteration, total_iterations, cast(latest, Text), cast(Job.ptl_profile, Text),
        cast(Job.tags, Text), Job.notes,
    )


def job_json(row: Sequence[Any]) -> str:
    """One `JobPublic` from a `_listing_columns()` row."""
    (job_id, name, status, spec, target, running, pending, autoscale, creator, email, created, started, finished, error,
     iteration, total, latest, ptl, tags, notes) = row
    stored = json.loads(spec)
    return (
        f'{{"id":{int(job_id)},"name":{_string(name)},"status":"{JobStatus(status).value}","spec":{spec},'
        f'"target_instances":{int(target)},"running_instances":{int(running)},"pending_instances":{int(pending)},'
        f'"shared_generation":{"true" if stored_spec_shares_generation(stored) else "false"},'
        f'"shared_training":{"true" if stored_spec_shares_training(stored) else "false"},'
        f'"autoscale":{"true" if autoscale else "false"},"created_by":{"null" if creator is None else int(creator)},'
        f'"created_by_email":{_string(email if creator is not None else None)},"created_at":{_moment(created)},'
        f'"started_at":{_moment(started)},"finished_at":{_moment(finished)},"error":{_string(error)},'
        f'"progress":{{"iteration":{int(iteration)},"total_iterations":{int(total or 0)}}},'
        f'"latest_metrics":{_stored(latest)},"ptl_profile":{_stored(ptl)},"tags":{tags or "[]"},'
        f'"notes":{_string(notes or "")}}}'
    )


def jobs_page(*, session: Session, team: Team, status: JobStatus | None, name: str | None, limit: int,
              offset: int, tag: str | None = None, q: str | None = None) -> bytes:
    """A page of the team's jobs, newest first, as `JobsPublic` JSON: one round trip (the total is a window count)
    unless the page is empty."""
    where = team_jobs_where(team, status, name, tag=tag, q=q)
    listing = select(*_listing_columns(), func.count().over()).where(*where).order_by(Job.id.desc())
    rows = session.execute(listing.limit(limit).offset(offset)).all()
    total = int(rows[0][-1]) if rows else count_jobs(session, where)
    items = ",".join(job_json(row[:-1]) for row in rows)
    return f'{{"data":[{items}],"count":{total}}}'.encode()
