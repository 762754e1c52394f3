"""Job submission (spec validation), lifecycle actions (409 on invalid transitions) and quotas (403/429)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.enums import JobStatus
from backend.db.models import Job, JobEvent
from backend.services.admission import admit_queued_jobs
from backend.services.jobs import record_iteration, transition_job

API = "/api/v1"


def _counts(backend: Any, team: Any) -> tuple[int, int]:
    with backend.session() as session:
        jobs = session.scalar(select(func.count()).select_from(Job).where(Job.team_id == team.id))
        events = session.scalar(
            select(func.count())
            .select_from(JobEvent)
            .join(Job, Job.id == JobEvent.job_id)
            .where(Job.team_id == team.id)
        )
    return jobs, events


def _set_status(backend: Any, job_id: int, *path: JobStatus) -> None:
    with backend.session() as session:
        job = session.get(Job, job_id)
        for status in path:
            transition_job(session=session, job=job, to=status)


def test_submit_returns_a_queued_job_with_the_validated_spec(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="gsm", generation={"instances": 2})
    assert job["status"] == "queued" and job["name"] == "gsm" and job["target_instances"] == 2
    assert job["spec"]["algorithm"]["name"] == "grpo"  # defaults filled in
    assert job["progress"] == {"iteration": 0, "total_iterations": 20}
    assert job["created_by"] == world.users["member"].id and job["running_instances"] == 0
    events = app_client.get(f"{API}/jobs/{job['id']}/events", headers=world.headers("viewer")).json()
    assert [e["kind"] for e in events["data"]] == ["created"]


def test_spec_with_a_wrong_field_gives_422_naming_the_field(app_client: TestClient, world: Any, job_spec: Any) -> None:
    before = _counts(world.backend, world.team)
    headers = world.headers("member")
    typo = app_client.post(f"{API}/jobs", json=job_spec(generation={"batchsize": 8}), headers=headers)
    assert typo.status_code == 422
    assert typo.json()["detail"][0]["loc"] == ["body", "generation", "batchsize"]
    bad_value = app_client.post(f"{API}/jobs", json=job_spec(mode="turbo"), headers=headers)
    assert bad_value.status_code == 422 and bad_value.json()["detail"][0]["loc"] == ["body", "mode"]
    unregistered = app_client.post(f"{API}/jobs", json=job_spec(model="/etc/passwd"), headers=headers)
    assert unregistered.status_code == 422 and unregistered.json()["detail"][0]["loc"] == ["body", "model"]
    rank_zero = app_client.post(f"{API}/jobs", json=job_spec(training={"lora": {"rank": 0}}), headers=headers)
    assert rank_zero.status_code == 422
    assert rank_zero.json()["detail"][0]["loc"] == ["body", "training", "lora", "rank"]
    server_path = app_client.post(f"{API}/jobs", json=job_spec(dataset={"path": "/etc/shadow"}), headers=headers)
    assert server_path.status_code == 422
    assert server_path.json()["detail"][0]["loc"] == ["body", "dataset", "path"]
    must_share = app_client.post(f"{API}/jobs", json=job_spec(generation={"share": True}), headers=headers)
    assert must_share.status_code == 422 and must_share.json()["detail"][0]["loc"] == ["body", "generation", "share"]
    assert "only LoRA jobs share" in must_share.json()["detail"][0]["msg"]
    assert _counts(world.backend, world.team) == before  # nothing written


def test_lora_jobs_say_whether_they_share_generation(app_client: TestClient, world: Any) -> None:
    lora = {"lora": {"rank": 8}}
    shared = world.submit(app_client, training=lora)
    own = world.submit(app_client, training=lora, generation={"share": False})
    full = world.submit(app_client)
    assert (shared["shared_generation"], own["shared_generation"], full["shared_generation"]) == (True, False, False)
    listed = app_client.get(f"{API}/jobs", headers=world.headers("viewer")).json()["data"]
    assert {j["id"]: j["shared_generation"] for j in listed}[shared["id"]] is True


def test_invalid_transitions_give_409_with_the_current_status(app_client: TestClient, world: Any) -> None:
    member = world.headers("member")
    job = world.submit(app_client)
    paused = app_client.post(f"{API}/jobs/{job['id']}/pause", headers=member)
    assert paused.status_code == 409 and paused.json()["current_status"] == "queued"
    assert app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=member).json()["status"] == "cancelled"
    before = _counts(world.backend, world.team)
    again = app_client.post(f"{API}/jobs/{job['id']}/cancel", headers=member)
    assert again.status_code == 409 and again.json()["current_status"] == "cancelled"
    assert "cancelled" in again.json()["detail"]
    scale = app_client.post(f"{API}/jobs/{job['id']}/scale", json={"target_instances": 2}, headers=member)
    assert scale.status_code == 409 and scale.json()["current_status"] == "cancelled"
    assert _counts(world.backend, world.team) == before
    finished = app_client.get(f"{API}/jobs/{job['id']}", headers=member).json()
    assert finished["finished_at"] is not None and finished["target_instances"] == job["target_instances"]


def test_pause_and_resume_a_running_job(app_client: TestClient, world: Any) -> None:
    member = world.headers("member")
    job = world.submit(app_client)
    _set_status(world.backend, job["id"], JobStatus.starting, JobStatus.running)
    assert app_client.post(f"{API}/jobs/{job['id']}/pause", headers=member).json()["status"] == "paused"
    assert app_client.post(f"{API}/jobs/{job['id']}/resume", headers=member).json()["status"] == "running"
    kinds = [e["message"] for e in app_client.get(f"{API}/jobs/{job['id']}/events", headers=member).json()["data"]]
    assert kinds[-2:] == ["running -> paused", "paused -> running"]


def test_scale_within_and_beyond_the_instance_quota(app_client: TestClient, pg_backend: Any, make_world: Any) -> None:
    world = make_world(pg_backend, max_concurrent_jobs=2, max_generation_instances=4)
    member = world.headers("member")
    first = world.submit(app_client, generation={"instances": 3})
    second = world.submit(app_client, generation={"instances": 1})
    with pg_backend.session() as session:
        admit_queued_jobs(session=session)
    ok = app_client.post(
        f"{API}/jobs/{second['id']}/scale", json={"target_instances": 1, "autoscale": True}, headers=member
    )
    assert ok.status_code == 200 and ok.json()["autoscale"] is True
    before = _counts(pg_backend, world.team)
    over = app_client.post(f"{API}/jobs/{second['id']}/scale", json={"target_instances": 2}, headers=member)
    assert over.status_code == 403
    assert over.json()["quota"] == "max_generation_instances" and "max_generation_instances" in over.json()["detail"]
    assert _counts(pg_backend, world.team) == before
    assert app_client.get(f"{API}/jobs/{first['id']}", headers=member).json()["target_instances"] == 3
    too_big = app_client.post(
        f"{API}/jobs",
        json={"model": "tiny", "dataset": {"builtin": "arithmetic"}, "generation": {"instances": 5}},
        headers=member,
    )
    assert too_big.status_code == 403 and too_big.json()["quota"] == "max_generation_instances"
    assert _counts(pg_backend, world.team) == before
    nonsense = app_client.post(f"{API}/jobs/{second['id']}/scale", json={"target_instances": 0}, headers=member)
    assert nonsense.status_code == 422 and nonsense.json()["detail"][0]["loc"] == ["body", "target_instances"]


def test_concurrent_jobs_quota_queues_admission_and_refuses_resume_with_429(
    app_client: TestClient, pg_backend: Any, make_world: Any
) -> None:
    world = make_world(pg_backend, max_concurrent_jobs=1, max_generation_instances=8)
    member = world.headers("member")
    first, second = world.submit(app_client), world.submit(app_client)
    with pg_backend.session() as session:
        admit_queued_jobs(session=session)
    status = {j["id"]: j["status"] for j in app_client.get(f"{API}/jobs", headers=member).json()["data"]}
    assert status == {first["id"]: "starting", second["id"]: "queued"}
    _set_status(pg_backend, first["id"], JobStatus.running)
    app_client.post(f"{API}/jobs/{first['id']}/pause", headers=member)  # releases the slot
    with pg_backend.session() as session:
        admit_queued_jobs(session=session)
    _set_status(pg_backend, second["id"], JobStatus.running)
    refused = app_client.post(f"{API}/jobs/{first['id']}/resume", headers=member)
    assert refused.status_code == 429 and refused.json()["quota"] == "max_concurrent_jobs"
    assert "max_concurrent_jobs" in refused.json()["detail"] and refused.headers["Retry-After"]
    assert app_client.get(f"{API}/jobs/{first['id']}", headers=member).json()["status"] == "paused"


def test_list_filters_pagination_and_recorded_data(app_client: TestClient, world: Any) -> None:
    viewer = world.headers("viewer")
    ids = [world.submit(app_client, name=f"sweep-{i}")["id"] for i in range(3)]
    other = world.submit(app_client, name="other")
    app_client.post(f"{API}/jobs/{ids[0]}/cancel", headers=world.headers("member"))
    page = app_client.get(f"{API}/jobs", params={"name": "sweep", "limit": 2}, headers=viewer).json()
    assert page["count"] == 3 and [j["id"] for j in page["data"]] == [ids[2], ids[1]]
    rest = app_client.get(f"{API}/jobs", params={"name": "sweep", "limit": 2, "offset": 2}, headers=viewer).json()
    assert [j["id"] for j in rest["data"]] == [ids[0]]
    cancelled = app_client.get(f"{API}/jobs", params={"status": "cancelled"}, headers=viewer).json()
    assert [j["id"] for j in cancelled["data"]] == [ids[0]]
    bad_status = app_client.get(f"{API}/jobs", params={"status": "exploded"}, headers=viewer)
    assert bad_status.status_code == 422 and bad_status.json()["detail"][0]["loc"] == ["query", "status"]
    with world.backend.session() as session:
        record_iteration(session=session, job_id=other["id"], iteration=1, metrics={"reward_mean": 0.5})
    got = app_client.get(f"{API}/jobs/{other['id']}", headers=viewer).json()
    assert got["latest_metrics"] == {"reward_mean": 0.5} and got["progress"]["iteration"] == 1
    iterations = app_client.get(f"{API}/jobs/{other['id']}/iterations", headers=viewer).json()
    assert iterations["data"][0]["metrics"] == {"reward_mean": 0.5}
    assert app_client.get(f"{API}/jobs/999999999", headers=viewer).status_code == 404


def test_a_spec_without_instances_gets_the_planners_suggestion_within_quota(
    app_client: TestClient, pg_backend: Any, make_world: Any
) -> None:
    world = make_world(pg_backend, max_concurrent_jobs=2, max_generation_instances=3)
    # 16 prompts x 8 samples at batch 32 -> 4 full-batch instances, capped by the quota of 3.
    capped = world.submit(app_client, training={"prompts_per_iteration": 16}, algorithm={"group_size": 8})
    assert capped["target_instances"] == 3
    small = world.submit(app_client, training={"prompts_per_iteration": 4}, algorithm={"group_size": 8})
    assert small["target_instances"] == 1
