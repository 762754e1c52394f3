"""Shared generation instances on the real platform (Celery workers, Postgres, Redis, the controller loop): two LoRA
jobs of two teams on the same base model run in ONE generation process, each training on its own samples generated
with its own adapter, and cancelling one leaves the other running to the end; neither team sees the other's job."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from runtime_platform import Platform, base_spec, wait_until
from sqlalchemy import select

from backend.db import GenerationInstance, Job, JobSample
from backend.services.jobs import cancel_job
from contract import keys
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
DIGITS = {"type": "regex", "params": {"pattern": "[0-9]"}}


def _lora_job(iterations: int, seed: int, lr: float) -> dict[str, Any]:
    return base_spec(mode="sync", seed=seed, reward=DIGITS, generation={"instances": 1},
                     training={"iterations": iterations, "prompts_per_iteration": 4, "lora": {"rank": 8},
                               "lr": lr})



def _heartbeat(platform: Platform, job_id: int) -> dict[str, Any] | None:
    with platform.backend.session() as session:
        instance_id = session.scalar(select(GenerationInstance.instance_id).where(
            GenerationInstance.job_id == job_id, GenerationInstance.status == "running"))
    raw = platform.client.get(keys.instance_heartbeat(job_id, instance_id)) if instance_id else None
    return json.loads(raw) if raw else None


def test_two_teams_lora_jobs_share_one_instance(platform: Platform) -> None:
    other_team, other_user = platform.other_team(max_concurrent_jobs=2, max_generation_instances=2)
    cancelled = platform.submit_as(platform.team, platform.user, _lora_job(60, seed=0, lr=1e-2))
    kept = platform.submit_as(other_team, other_user, _lora_job(8, seed=1, lr=2e-2))

    beats: dict[int, dict[str, Any]] = {}

    def both_running() -> bool:
        for job_id in (cancelled, kept):
            beat = _heartbeat(platform, job_id)
            if beat is not None:
                beats[job_id] = beat
        return len(beats) == 2

    wait_until(both_running, 240, "both jobs' instances run", logs=platform.logs_tail)
    shared_a, shared_b = beats[cancelled], beats[kept]
    assert shared_a["shared"] and shared_a["shared"] == shared_b["shared"], (shared_a, shared_b)
    assert (shared_a["pid"], shared_a["host"]) == (shared_b["pid"], shared_b["host"])  # one process, one base model
    assert any("shared generation instance" in e for e in platform.events(kept))
    # and their training processes map one copy of the frozen base weights (workers/models/shared_base.py)
    mapped: dict[int, list[str]] = {}

    def both_mapped() -> bool:
        for job_id in (cancelled, kept):
            mapped[job_id] = [e for e in platform.events(job_id) if e.startswith("frozen base weights")]
        return all(mapped.values())

    wait_until(both_mapped, 240, "both trainers map the base weights", logs=platform.logs_tail)
    assert mapped[cancelled][0].split("copy ")[1] == mapped[kept][0].split("copy ")[1], mapped

    # cancel the first team's job while the other trains: the other runs to its end on the same process
    wait_until(lambda: len(platform.iterations(cancelled)) >= 2, 240, "the first job trains", logs=platform.logs_tail)
    with platform.backend.session() as session:
        job = session.get(Job, cancelled)
        assert job is not None
        cancel_job(session=session, job=job)
    wait_until(lambda: set(platform.statuses(cancelled).values()) <= {"stopped", "dead"}, 60,
               "the cancelled job's instance leaves the shared instance", logs=platform.logs_tail)
    done = platform.wait_done(kept, timeout_s=600)
    assert done.error is None and platform.job(cancelled).status == JobStatus.cancelled

    for job_id, iterations in ((kept, 8), (cancelled, None)):
        rows = platform.iterations(job_id)
        assert iterations is None or len(rows) == iterations
        # generated with the job's own adapter: in sync mode the trainer's first pass over an iteration's samples
        # runs the very weights that sampled them, so the PPO ratio is 1 (another job's adapter would move it)
        for row in rows:
            assert abs(row["ratio"] - 1.0) < 2e-3 and row["clip_frac"] == 0.0, row
        with platform.backend.session() as session:
            samples = session.scalars(select(JobSample).where(JobSample.job_id == job_id)).all()
        assert samples and {s.instance_id for s in samples} <= set(platform.statuses(job_id))
    later = [r["ratio"] for r in platform.iterations(kept)[1:]]
    assert later, "the kept job trained past its first version"

    # isolation is unchanged: each team's ids of the other's job answer 404
    with platform.backend.client() as api:
        for job_id, (user, team) in ((kept, (platform.user, platform.team)), (cancelled, (other_user, other_team))):
            headers = platform.backend.auth_headers(user, team)
            for path in ("", "/samples", "/iterations", "/events", "/timeline"):
                answer = api.get(f"/api/v1/jobs/{job_id}{path}", headers=headers)
                assert answer.status_code == 404, (path, answer.status_code)


def test_kill_9_of_a_shared_instance_moves_its_jobs_to_a_new_one(platform: Platform) -> None:
    """The shared process dies mid-job: each job's instance is declared dead and replaced, the controller starts a
    new shared process for the replacements, and both jobs finish every iteration."""
    first = platform.submit_as(platform.team, platform.user, _lora_job(10, seed=2, lr=1e-2))
    second = platform.submit_as(platform.team, platform.user, _lora_job(10, seed=3, lr=1e-2))
    beats: dict[int, dict[str, Any]] = {}

    def both_running() -> bool:
        beats.update({job_id: beat for job_id in (first, second) if (beat := _heartbeat(platform, job_id))})
        return len(beats) == 2

    wait_until(both_running, 240, "both jobs' instances run", logs=platform.logs_tail)
    pid = beats[first]["pid"]
    assert beats[second]["pid"] == pid
    wait_until(lambda: len(platform.iterations(first)) >= 2, 240, "the jobs train", logs=platform.logs_tail)
    os.kill(pid, signal.SIGKILL)
    for job_id in (first, second):
        assert platform.wait_done(job_id, timeout_s=600).error is None
        assert len(platform.iterations(job_id)) == 10
        assert any("stopped heart-beating; replacing it" in e for e in platform.events(job_id))
        assert "dead" in platform.statuses(job_id).values()
    replaced = {json.loads(raw)["pid"] for job_id in (first, second)
                for iid in platform.statuses(job_id)
                if (raw := platform.client.get(keys.instance_heartbeat(job_id, iid))) is not None}
    assert pid in replaced and len(replaced) == 2, replaced  # the dead process's last beats, and ONE new process
