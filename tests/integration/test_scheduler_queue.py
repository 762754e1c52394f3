"""The scheduler on a real platform (Postgres, Redis, a Celery training worker with ONE slot, the controller loop):
two teams' jobs alternate by fair share, not submit order, and a waiting job's queue entry is on the API and the
CLI; a low-priority job preempted at a checkpoint by another team's normal job resumes and records iterations 1..N
exactly once, and its team learns why without the other team's job name."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_platform import Platform, base_spec, wait_until
from sqlalchemy import select
from typer.testing import CliRunner
from waiting import api_in_thread

from backend.db import Iteration, Job, JobEvent, JobStatus
from streamrl.cli.main import app

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ITERATIONS = 150  # the low-priority job: long enough that the normal one would wait past the grace period


@pytest.fixture(scope="module")
def one_slot(pg_backend: Any, redis_url: str, tiny_model_dir: Path) -> Iterator[tuple[Platform, str]]:
    # the controller (a thread of this process) forgets past use within seconds: jobs of a few seconds each then
    # take turns whatever their lengths (with the default hour, a team whose first job ran long yields more turns)
    # and preempts for anything that would otherwise wait more than 5 s (these jobs are seconds long)
    knobs = {"STREAMRL_FAIR_SHARE_HALF_LIFE_S": "2", "STREAMRL_PREEMPT_GRACE_S": "5"}
    before = {name: os.environ.get(name) for name in knobs}
    os.environ.update(knobs)
    try:
        with Platform.start(pg_backend, redis_url, tiny_model_dir, start_workers=False) as platform, \
                api_in_thread(pg_backend.settings) as url:
            platform.start_worker("training", concurrency=1)
            platform.wait_registered("training")
            yield platform, url
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _spec(name: str, iterations: int, **extra: Any) -> dict[str, Any]:
    return base_spec(name=name, mode="colocated", training={"iterations": iterations}, **extra)


def _started_order(platform: Platform, job_ids: list[int]) -> list[int]:
    with platform.backend.session() as session:
        rows = session.execute(select(JobEvent.job_id, JobEvent.id).where(
            JobEvent.job_id.in_(job_ids), JobEvent.kind == "status", JobEvent.message == "queued -> starting")
            .order_by(JobEvent.id)).all()
    return [job_id for job_id, _ in rows]


def test_two_teams_alternate_by_fair_share_and_the_queue_says_why(one_slot: tuple[Platform, str]) -> None:
    platform, url = one_slot
    other, other_user = platform.other_team(max_concurrent_jobs=4)
    # all ours first; the first long enough that every other job is still queued when the queue is read below (the
    # others take well under a second each here, and would otherwise all have run by then)
    ours = [platform.submit(**_spec(f"ours-{k}", 40 if k == 0 else 3)) for k in range(3)]
    theirs = [platform.submit_as(other, other_user, _spec(f"theirs-{k}", 3)) for k in range(3)]

    def waiting_entry() -> dict[str, Any] | None:
        with platform.backend.client() as api:
            answer = api.get(f"/api/v1/jobs/{theirs[-1]}", headers=platform.backend.auth_headers(other_user))
        job = answer.json()
        return job["queue"] if job["status"] == "queued" and job.get("queue") else None

    entry = wait_until(waiting_entry, 120, "a queue entry for their last job", logs=platform.logs_tail)
    assert entry["position"] >= 1 and entry["waiting_for"] == "training_slots"
    assert "waiting for training slots" in entry["reason"] and "ours-" not in entry["reason"]
    token = platform.backend.auth_headers(other_user)["Authorization"].split()[1]
    shown = CliRunner().invoke(app, ["--url", url, "--token", token, "queue"])
    assert shown.exit_code == 0, shown.output
    assert f"{theirs[-1]} theirs-2" in shown.output and "waiting for training slots" in shown.output
    assert "ours-" not in shown.output  # the other team's items: no names
    assert "other team 1" in shown.output

    for job_id in ours + theirs:
        platform.wait_done(job_id, timeout_s=600)
    order = _started_order(platform, ours + theirs)
    assert sorted(order) == sorted(ours + theirs), order
    assert order != ours + theirs  # not submit order
    team_of = {**dict.fromkeys(ours, "ours"), **dict.fromkeys(theirs, "theirs")}
    teams = [team_of[j] for j in order]
    # by fair share the other team's first job goes second (submit order would give ours its three first); after
    # that, which of two equal teams goes next follows their decayed use, i.e. how long each one's jobs happened to
    # run on this machine (one run here gave theirs three turns in a row after a long first job of ours)
    assert teams[:2] == ["ours", "theirs"], teams


def test_a_low_priority_job_is_preempted_at_a_checkpoint_and_resumes_exactly_once(
        one_slot: tuple[Platform, str]) -> None:
    platform, _ = one_slot
    other, other_user = platform.other_team(max_concurrent_jobs=4)
    low = platform.submit(**_spec("low-background", ITERATIONS, priority="low", checkpoint={"interval": 2}))
    platform.wait_status(low, {JobStatus.running}, timeout_s=300)
    wait_until(lambda: platform.job(low).current_iteration >= 1, 300, "the low job's first iteration",
               logs=platform.logs_tail)
    urgent = platform.submit_as(other, other_user, _spec("bravo-secret-run", 2))
    platform.wait_status(low, {JobStatus.queued}, timeout_s=300)  # handed back at a checkpoint, back in the queue
    handed_back_at = platform.job(low).current_iteration
    assert handed_back_at % 2 == 0 and handed_back_at >= 2  # at a checkpoint, not before its first one
    platform.wait_done(urgent, timeout_s=600)
    platform.wait_done(low, timeout_s=600)

    with platform.backend.session() as session:
        recorded = list(session.scalars(select(Iteration.iteration).where(Iteration.job_id == low)
                                        .order_by(Iteration.iteration)))
        assert session.get(Job, low).current_iteration == ITERATIONS
    assert len(recorded) == ITERATIONS and len(set(recorded)) == ITERATIONS, recorded  # 1..N, each once
    events = platform.events(low)
    why = [e for e in events if e.startswith("preempted for a normal-priority job of another team")]
    assert why and "low priority" in why[0], events
    assert any(e.startswith("back in the queue at iteration") for e in events), events
    assert any(e.startswith("resumed by the scheduler") for e in events), events
    assert not any("bravo-secret-run" in e for e in events), events
