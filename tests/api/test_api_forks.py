"""POST /jobs/{id}/fork: a new queued job from one of the job's checkpoints with changed settings, its lineage
recorded (parent_job_id / parent_iteration in GET /jobs/{id} and GET /jobs) and the checkpoint copied into its own
checkpoints directory; a missing iteration is a 422 naming it, another team's job a 404, a fixed field a 422. The
fork's start from those weights with the job's workers: tests/integration/test_fork_job.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from backend.db.models import Job
from backend.services.job_data import record_checkpoint

API = "/api/v1"


def _parent_with_checkpoint(world: Any, client: TestClient, iteration: int = 2) -> tuple[int, Path]:
    """A job with a (control-plane only) checkpoint directory of `iteration`, recorded as the driver records it."""
    parent = world.submit(client, name="parent", training={"lr": 1e-3, "iterations": 6})["id"]
    directory = world.backend.settings.artifacts / "jobs" / str(parent) / "checkpoints" / f"iter_{iteration:06d}"
    directory.mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"weights of iteration %d" % iteration)
    (directory / "trainer_state.pt").write_bytes(b"optimizer state")
    with world.backend.session() as session:
        record_checkpoint(session=session, job_id=parent, iteration=iteration, path=str(directory))
    return parent, directory


def test_a_fork_records_its_parent_and_starts_from_a_copy_of_the_checkpoint(
    app_client: TestClient, world: Any
) -> None:
    parent, directory = _parent_with_checkpoint(world, app_client)
    answer = app_client.post(f"{API}/jobs/{parent}/fork", headers=world.headers("member"),
                             json={"iteration": 2, "overrides": {"training.lr": 5e-6, "mode": "async"}})
    assert answer.status_code == 201, answer.text
    fork = answer.json()
    assert (fork["parent_job_id"], fork["parent_iteration"], fork["status"]) == (parent, 2, "queued")
    assert fork["name"] == "parent-fork-2" and fork["progress"]["iteration"] == 2
    assert fork["spec"]["training"]["lr"] == 5e-6 and fork["spec"]["mode"] == "async"
    assert fork["spec"]["training"]["iterations"] == 6  # untouched settings are the parent's
    copied = world.backend.settings.artifacts / "jobs" / str(fork["id"]) / "checkpoints" / "iter_000002"
    assert sorted(p.name for p in copied.iterdir()) == ["model.safetensors", "trainer_state.pt"]
    assert (copied / "model.safetensors").read_bytes() == (directory / "model.safetensors").read_bytes()
    assert not copied.with_name("iter_000002.tmp").exists()
    shown = app_client.get(f"{API}/jobs/{fork['id']}", headers=world.headers("viewer")).json()
    assert (shown["parent_job_id"], shown["parent_iteration"]) == (parent, 2)
    listed = {job["id"]: job for job in app_client.get(f"{API}/jobs", headers=world.headers("viewer")).json()["data"]}
    assert (listed[fork["id"]]["parent_job_id"], listed[parent]["parent_job_id"]) == (parent, None)
    events = app_client.get(f"{API}/jobs/{parent}/events", headers=world.headers("viewer")).json()
    assert any(f"as job {fork['id']}" in event["message"] for event in events["data"])
    renamed = app_client.post(f"{API}/jobs/{parent}/fork", headers=world.headers("member"),
                              json={"iteration": 2, "overrides": {"name": "lr-sweep", "training": {"lr": 1e-4}}})
    assert renamed.status_code == 201, renamed.text
    assert renamed.json()["name"] == "lr-sweep" and renamed.json()["spec"]["training"]["iterations"] == 6


def test_a_missing_iteration_or_a_bad_override_is_422_and_creates_nothing(app_client: TestClient, world: Any) -> None:
    parent, _ = _parent_with_checkpoint(world, app_client)
    headers = world.headers("member")
    missing = app_client.post(f"{API}/jobs/{parent}/fork", headers=headers, json={"iteration": 7})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "iteration"]
    message = missing.json()["detail"][0]["msg"]
    assert "iteration 7" in message and "checkpoints: 2" in message
    bad_lr = app_client.post(f"{API}/jobs/{parent}/fork", headers=headers,
                             json={"iteration": 2, "overrides": {"training.lr": -1}})
    assert bad_lr.status_code == 422 and bad_lr.json()["detail"][0]["loc"] == ["body", "overrides", "training.lr"]
    other_model = app_client.post(f"{API}/jobs/{parent}/fork", headers=headers,
                                  json={"iteration": 2, "overrides": {"model": "another"}})
    assert other_model.status_code == 422 and other_model.json()["detail"][0]["loc"] == ["body", "overrides", "model"]
    with world.backend.session() as session:
        assert session.query(Job).filter(Job.parent_job_id == parent).count() == 0
    jobs_dir = world.backend.settings.artifacts / "jobs"
    assert [p.name for p in jobs_dir.iterdir() if int(p.name) > parent] == []  # no copy left behind


def test_another_team_cannot_fork_and_a_viewer_may_not(app_client: TestClient, world: Any, other_world: Any) -> None:
    parent, _ = _parent_with_checkpoint(world, app_client)
    theirs = app_client.post(f"{API}/jobs/{parent}/fork", headers=other_world.headers("admin"), json={"iteration": 2})
    assert theirs.status_code == 404 and theirs.json()["detail"] == f"job {parent} not found"
    viewer = app_client.post(f"{API}/jobs/{parent}/fork", headers=world.headers("viewer"), json={"iteration": 2})
    assert viewer.status_code == 403
    with world.backend.session() as session:
        assert session.query(Job).filter(Job.parent_job_id == parent).count() == 0
