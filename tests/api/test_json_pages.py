"""`GET /jobs` is spliced from stored JSON text (services/json_pages.py): the answer must equal what `JobsPublic`
serializes from the ORM rows (presenters.job_row_public), on PostgreSQL and SQLite, for every field a job can have
set or unset, with filters, paging and an empty page."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from backend.api.presenters import job_row_public
from backend.db.enums import JobStatus
from backend.db.models import Iteration, Job, Team, User
from backend.schemas.jobs import JobsPublic
from backend.services.job_data import record_iteration
from backend.services.jobs import create_job, list_jobs
from contract.spec import JobSpec

API = "/api/v1"


def _seed(backend: Any, register_model: Any) -> tuple[Team, User]:
    team = backend.make_team(max_concurrent_jobs=100, max_generation_instances=1000)
    user = backend.make_user(team=team)
    other = backend.make_user(team=team)
    register_model(backend, team)
    names = ["plain", 'naïve “quotes” \\ "x"', "émoji 🚀 run", "plain two"]
    with backend.session() as session:
        for index, name in enumerate(names):
            spec = JobSpec.model_validate({
                "name": name, "model": "tiny", "dataset": {"builtin": "arithmetic"},
                "training": {"iterations": 7 + index},
            })
            creator = session.merge(other if index == 2 else user)
            job = create_job(session=session, team=session.merge(team), user=creator, spec=spec)
            if index in (0, 1):  # tags and notes, with characters JSON must escape in the notes
                job.tags = ["sweep", "lr:1e-4"] if index == 0 else ["sweep-2"]
                job.notes = 'line one\n"quoted" é' if index == 0 else "Diverged"
            if index == 1:  # ran, failed with an error, has metrics and a PTL profile
                job.status = JobStatus.failed
                job.started_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
                job.finished_at = datetime(2026, 1, 2, 3, 9, 5, 120_000, tzinfo=UTC)
                job.error = 'boom: "quoted"\nsecond line'
                job.ptl_profile = {"points": [[1, 0.004], [8, 0.0061]]}
                job.autoscale = True
                record_iteration(session=session, job_id=job.id, iteration=1, metrics={"reward_mean": 0.25})
                record_iteration(session=session, job_id=job.id, iteration=2,
                                 metrics={"reward_mean": float("nan"), "lengths": [1, 2], "note": "é"})
            if index == 3:
                job.status = JobStatus.running
                job.started_at = datetime.now(UTC) - timedelta(seconds=30)
                if backend.engine.dialect.name == "sqlite":  # stored before non-finite numbers were nulled
                    session.add(Iteration(job_id=job.id, iteration=1, metrics={"kl": float("inf")}))
        session.flush()
        deleted = session.merge(other)
        session.delete(deleted)  # created_by becomes NULL (ON DELETE SET NULL) for job 3
    return team, user


@pytest.mark.parametrize("backend_name", ["pg_backend", "sqlite_backend"])
def test_jobs_json_equals_the_schema_serialization(
    backend_name: str, request: pytest.FixtureRequest, register_model: Any
) -> None:
    backend = request.getfixturevalue(backend_name)
    team, user = _seed(backend, register_model)
    headers = backend.auth_headers(user, team)
    queries: list[dict[str, Any]] = [
        {}, {"limit": 2}, {"limit": 2, "offset": 2}, {"status": "failed"}, {"name": "naïve"}, {"name": "plain"},
        {"offset": 50}, {"status": "succeeded"}, {"tag": "sweep"}, {"tag": "lr:1e-4"}, {"q": "DIVERGED"},
        {"q": "sweep"}, {"q": '"quoted"'}, {"tag": "sweep", "q": "plain"},
    ]
    with backend.client() as client:
        for params in queries:
            answer = client.get(f"{API}/jobs", params=params, headers=headers)
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"] == "application/json"
            with backend.session() as session:
                rows, total = list_jobs(
                    session=session, team=session.get(Team, team.id), status=params.get("status"),
                    name=params.get("name"), limit=params.get("limit", 50), offset=params.get("offset", 0),
                    tag=params.get("tag"), q=params.get("q"),
                )
                expected = JobsPublic(data=[job_row_public(*row) for row in rows], count=total).model_dump_json()
            assert json.loads(answer.content) == json.loads(expected), params
        everything = json.loads(client.get(f"{API}/jobs", headers=headers).content)
    assert everything["count"] == 4
    failed = next(job for job in everything["data"] if job["status"] == "failed")
    assert failed["latest_metrics"] == {"reward_mean": None, "lengths": [1, 2], "note": "é"}
    assert failed["progress"] == {"iteration": 2, "total_iterations": 8}
    assert failed["finished_at"] == "2026-01-02T03:09:05.120000Z" and failed["started_at"] == "2026-01-02T03:04:05Z"
    orphan = next(job for job in everything["data"] if job["name"] == "émoji 🚀 run")
    assert orphan["created_by"] is None and orphan["created_by_email"] is None and orphan["tags"] == []
    tagged = next(job for job in everything["data"] if job["name"] == "plain")
    assert tagged["tags"] == ["sweep", "lr:1e-4"] and tagged["notes"] == 'line one\n"quoted" é'


def test_iteration_timestamps_with_and_without_microseconds(pg_backend: Any, register_model: Any) -> None:
    """PostgreSQL renders the iterations page itself: a whole-second timestamp has no fraction, as in isoformat."""
    team = pg_backend.make_team()
    user = pg_backend.make_user(team=team)
    register_model(pg_backend, team)
    spec = JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"}})
    moments = [datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC), datetime(2026, 3, 4, 5, 6, 7, 1, tzinfo=UTC)]
    with pg_backend.session() as session:
        job_id = create_job(session=session, team=session.merge(team), user=session.merge(user), spec=spec).id
        for number, moment in enumerate(moments, start=1):
            session.add(Iteration(job_id=job_id, iteration=number, metrics={}, created_at=moment))
        session.flush()
        assert session.get(Job, job_id) is not None
    with pg_backend.client() as client:
        page = client.get(f"{API}/jobs/{job_id}/iterations", headers=pg_backend.auth_headers(user, team)).json()
    assert [row["created_at"] for row in page["data"]] == ["2026-03-04T05:06:07Z", "2026-03-04T05:06:07.000001Z"]


@pytest.mark.parametrize("backend_name", ["pg_backend", "sqlite_backend"])
def test_one_job_json_equals_the_schema_serialization(
    backend_name: str, request: pytest.FixtureRequest, register_model: Any
) -> None:
    """`GET /jobs/{id}` is spliced like the list (services/json_pages.job_page): equal to `JobPublic` for each job."""
    from backend.services.jobs import get_job_row

    backend = request.getfixturevalue(backend_name)
    team, user = _seed(backend, register_model)
    headers = backend.auth_headers(user, team)
    with backend.client() as client:
        listed = json.loads(client.get(f"{API}/jobs", headers=headers).content)["data"]
        for job in listed:
            answer = client.get(f"{API}/jobs/{job['id']}", headers=headers)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            with backend.session() as session:
                row = get_job_row(session=session, team=session.get(Team, team.id), job_id=job["id"])
                expected = job_row_public(*row).model_dump_json()
            assert json.loads(answer.content) == json.loads(expected) == job
        other = backend.make_team()
        foreign = client.get(f"{API}/jobs/{listed[0]['id']}", headers=backend.auth_headers(
            backend.make_user(team=other), other))
        assert foreign.status_code == 404


@pytest.mark.parametrize("backend_name", ["pg_backend", "sqlite_backend"])
def test_samples_json_equals_the_schema_serialization(
    backend_name: str, request: pytest.FixtureRequest, register_model: Any
) -> None:
    """`GET /jobs/{id}/samples` is spliced from columns (services/json_pages.samples_page): equal to
    `Page[SamplePublic]` of the ORM rows, newest first, filtered by iteration, with every optional field set or not."""
    from backend.db.models import JobSample
    from backend.schemas.common import Page
    from backend.schemas.jobs import SamplePublic
    from backend.services.job_data import list_samples

    backend = request.getfixturevalue(backend_name)
    team, user = _seed(backend, register_model)
    headers = backend.auth_headers(user, team)
    with backend.session() as session:
        job_id = session.scalar(select(Job.id).where(Job.team_id == team.id).order_by(Job.id))
        episode = {"turns": 2, "messages": [{"role": "user", "content": 'é "q"\n'}], "segments": [[0, 3, True]]}
        for number in range(6):
            session.add(JobSample(
                job_id=job_id, iteration=1 + number % 2, sample_id=f"{job_id}:{number}", prompt=f'p{number} "é"\n',
                response="🚀" * number, reward=[0.5, 1.0, -2.25, 1e-7, 3.0, 0.0][number], length=number,
                policy_version=number, instance_id="gen-0" if number % 2 else "",
                reward_components={"a": 1, "b": 0.5} if number % 3 == 0 else None,
                reward_error="timed out" if number == 4 else None, truncated=number == 5,
                episode=episode if number == 2 else None))
    with backend.client() as client:
        for params in ({}, {"limit": 2}, {"iteration": 2}, {"iteration": 9}, {"iteration": 1, "limit": 1}):
            answer = client.get(f"{API}/jobs/{job_id}/samples", params=params, headers=headers)
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            with backend.session() as session:
                rows = list_samples(session=session, job_id=job_id, iteration=params.get("iteration"),
                                    limit=params.get("limit", 50))
                expected = Page(data=[SamplePublic.model_validate(r) for r in rows], count=len(rows)).model_dump_json()
            assert json.loads(answer.content) == json.loads(expected), params
        page = json.loads(client.get(f"{API}/jobs/{job_id}/samples", headers=headers).content)
        assert [s["sample_id"] for s in page["data"]] == [f"{job_id}:{n}" for n in range(5, -1, -1)]
        assert page["data"][-1]["reward_components"] == {"a": 1.0, "b": 0.5}
        assert page["data"][3]["episode"] == episode
        other = backend.make_team()
        assert client.get(f"{API}/jobs/{job_id}/samples", headers=backend.auth_headers(
            backend.make_user(team=other), other)).status_code == 404
