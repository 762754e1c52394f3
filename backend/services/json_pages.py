"""The pages dashboards poll, written as JSON text without ORM objects, JSON decoding or pydantic models.

`GET /jobs`, `GET /jobs/{id}`, `GET /jobs/{id}/iterations` and `GET /jobs/{id}/samples` are what every open dashboard
asks for over and over; their rows hold stored JSON (specs, metrics, episodes) that the ORM path decoded and pydantic
re-encoded on every request. Here the stored text is spliced in as it is. Each answer equals what its schema
(`JobsPublic`, `JobPublic`, `Page[IterationPublic]`, `Page[SamplePublic]`) serializes: tests/api/test_json_pages.py
and tests/api/test_iterations_json.py compare them on PostgreSQL and SQLite.

On PostgreSQL the iterations page is rendered by the database in one aggregate (no per-row Python at all); other
dialects splice row by row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Integer, Select, Text, bindparam, cast, func, select, text
from sqlalchemy.orm import Session

from backend.db.enums import JobStatus
from backend.db.models import Job, JobSample, Team
from backend.services.job_data import iteration_rows, silent_cutoff, summary_columns
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
        found = session.connection().execute(
            _PG_ITERATIONS_PAGE, {"job_id": job_id, "team_id": team_id, "after": after, "limit": limit}
        ).first()
        if found is None:
            return None
        count, items = found
        return f'{{"data":[{items}],"count":{int(count)}}}'.encode()
    rows = iteration_rows(session=session, team_id=team_id, job_id=job_id, after=after, limit=limit)
    return None if rows is None else iterations_page_json(rows)


# -- GET /jobs ----------------------------------------------------------------------------------------------------
def _listing_columns(cutoff: Any = None) -> tuple[Any, ...]:
    """A job's `JobPublic` fields as plain columns: stored JSON as text, the total iterations read in SQL."""
    running, pending, latest, email = summary_columns(cutoff)
    total_iterations = cast(Job.spec[("training", "iterations")].as_string(), Integer)
    return (
        Job.id, Job.name, Job.status, cast(Job.spec, Text), Job.target_instances, running, pending, Job.autoscale,
        Job.created_by_id, email, Job.created_at, Job.started_at, Job.finished_at, Job.error,
        Job.current_iteration, total_iterations, cast(latest, Text), cast(Job.ptl_profile, Text),
        cast(Job.tags, Text), Job.notes, Job.parent_job_id, Job.parent_iteration,
    )


def _integer(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def job_json(row: Sequence[Any]) -> str:
    """One `JobPublic` from a `_listing_columns()` row."""
    (job_id, name, status, spec, target, running, pending, autoscale, creator, email, created, started, finished, error,
     iteration, total, latest, ptl, tags, notes, parent, parent_iteration) = row
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
        f'"notes":{_string(notes or "")},"parent_job_id":{_integer(parent)},'
        f'"parent_iteration":{_integer(parent_iteration)},'
        f'"queue":null}}'  # a queued job's entry: backend/services/queue_view.py
    )


def jobs_page(*, session: Session, team: Team, status: JobStatus | None, name: str | None, limit: int,
              offset: int, tag: str | None = None, q: str | None = None) -> bytes:
    """A page of the team's jobs, newest first, as `JobsPublic` JSON: one round trip (the total is a window count)
    unless the page is empty."""
    where = team_jobs_where(team, status, name, tag=tag, q=q)
    if status is None and not name and not tag and not q:  # what dashboards poll: a statement built once
        values = {"team_id": team.id, "cutoff": silent_cutoff(), "limit": limit, "offset": offset}
        rows: Sequence[Any] = session.connection().execute(_team_listing(), values).all()
    else:
        listing = select(*_listing_columns(), func.count().over()).where(*where).order_by(Job.id.desc())
        rows = session.execute(listing.limit(limit).offset(offset)).all()
    total = int(rows[0][-1]) if rows else count_jobs(session, where)
    items = ",".join(job_json(row[:-1]) for row in rows)
    return f'{{"data":[{items}],"count":{total}}}'.encode()


# Statements the polled pages run on every request, built once: SQLAlchemy then reuses their memoized cache key and
# compiled form instead of building, hashing and looking up a new statement each time (a third of a small page's
# CPU). Values come as bind parameters, the instance cutoff included. They run on the session's connection (Core):
# their rows are plain tuples, so the ORM's per-execution result set-up has nothing to add.
@lru_cache(maxsize=1)
def _team_listing() -> Select[Any]:
    columns = _listing_columns(bindparam("cutoff"))
    return (select(*columns, func.count().over()).where(Job.team_id == bindparam("team_id"))
            .order_by(Job.id.desc()).limit(bindparam("limit")).offset(bindparam("offset")))


@lru_cache(maxsize=1)
def _one_job() -> Select[Any]:
    return select(*_listing_columns(bindparam("cutoff"))).where(Job.id == bindparam("job_id"),
                                                               Job.team_id == bindparam("team_id"))


# -- GET /jobs/{id} -----------------------------------------------------------------------------------------------
def job_page(*, session: Session, team: Team, job_id: int) -> bytes | None:
    """One of the team's jobs as `JobPublic` JSON (one query); None when it is not the team's."""
    values = {"job_id": job_id, "team_id": team.id, "cutoff": silent_cutoff()}
    row = session.connection().execute(_one_job(), values).first()
    return None if row is None else job_json(row).encode()


# -- GET /jobs/{id}/samples ---------------------------------------------------------------------------------------
_SAMPLE_COLUMNS = (
    JobSample.sample_id, JobSample.iteration, JobSample.prompt, JobSample.response, JobSample.reward, JobSample.length,
    JobSample.policy_version, JobSample.instance_id, JobSample.reward_components, JobSample.reward_error,
    JobSample.truncated, cast(JobSample.episode, Text), JobSample.mismatch,
)


@lru_cache(maxsize=1)
def _team_job() -> Select[Any]:
    return select(Job.id).where(Job.id == bindparam("job_id"), Job.team_id == bindparam("team_id"))


# the trajectory explorer's filters: name -> the condition it adds (bound to a parameter of the same name);
# staleness = the version trained at (iteration - 1) minus the version that sampled it
SAMPLE_FILTERS: dict[str, Any] = {
    "iteration": lambda: JobSample.iteration == bindparam("iteration"),
    "min_reward": lambda: JobSample.reward >= bindparam("min_reward"),
    "max_reward": lambda: JobSample.reward <= bindparam("max_reward"),
    "min_length": lambda: JobSample.length >= bindparam("min_length"),
    "max_length": lambda: JobSample.length <= bindparam("max_length"),
    "policy_version": lambda: JobSample.policy_version == bindparam("policy_version"),
    "min_staleness": lambda: JobSample.iteration - 1 - JobSample.policy_version >= bindparam("min_staleness"),
    "max_staleness": lambda: JobSample.iteration - 1 - JobSample.policy_version <= bindparam("max_staleness"),
    "min_mismatch": lambda: JobSample.mismatch >= bindparam("min_mismatch"),
}


@lru_cache(maxsize=64)
def _newest_samples(filters: frozenset[str]) -> Select[Any]:
    query = select(*_SAMPLE_COLUMNS).where(JobSample.job_id == bindparam("job_id"))
    for name in sorted(filters):
        query = query.where(SAMPLE_FILTERS[name]())
    return query.order_by(JobSample.id.desc()).limit(bindparam("limit"))


def _number(value: float | None) -> str:
    """A float as pydantic writes it (non-finite: null)."""
    return "null" if value is None or not math.isfinite(value) else json.dumps(float(value))


def sample_json(row: Sequence[Any]) -> str:
    """One `SamplePublic` from a `_SAMPLE_COLUMNS` row."""
    (sample_id, iteration, prompt, response, reward, length, version, instance, components, error, truncated,
     episode, mismatch) = row
    parts = "null" if components is None else (
        "{" + ",".join(f"{_string(str(name))}:{_number(value)}" for name, value in components.items()) + "}")
    return (
        f'{{"sample_id":{_string(sample_id)},"iteration":{int(iteration)},"prompt":{_string(prompt)},'
        f'"response":{_string(response)},"reward":{_number(reward)},"length":{int(length)},'
        f'"policy_version":{int(version)},"instance_id":{_string(instance)},"reward_components":{parts},'
        f'"reward_error":{_string(error)},"truncated":{"true" if truncated else "false"},'
        f'"episode":{_stored(episode)},"mismatch":{_number(mismatch)}}}'
    )


def samples_page(*, session: Session, team: Team, job_id: int, iteration: int | None, limit: int,
                 filters: dict[str, float | None] | None = None) -> bytes | None:
    """The team's job's newest samples (of one iteration, if given; within `filters`, keys of SAMPLE_FILTERS) as
    `Page[SamplePublic]` JSON; None when the job is not the team's. The page reads the (job_id, id) index
    backwards: `limit` rows, whatever the job's total."""
    if session.connection().scalar(_team_job(), {"job_id": job_id, "team_id": team.id}) is None:
        return None
    given = {name: value for name, value in (filters or {}).items() if value is not None}
    if iteration is not None:
        given["iteration"] = iteration
    values = {"job_id": job_id, "limit": limit, **given}
    rows = session.connection().execute(_newest_samples(frozenset(given)), values).all()
    items = ",".join(sample_json(row) for row in rows)
    return f'{{"data":[{items}],"count":{len(rows)}}}'.encode()
