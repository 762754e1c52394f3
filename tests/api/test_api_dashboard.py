"""Dashboard read models on a real Postgres: job health from database facts, the runs table in one request, spec YAML,
and the exports (metrics CSV/JSON, events JSONL, checkpoint tar) with team scoping."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from fastapi.testclient import TestClient
from sqlalchemy import event

from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Job
from backend.services.health import MIN_STALL_S, stall_limit
from backend.services.job_data import record_checkpoint, record_iteration
from backend.services.jobs import record_event, transition_job

API = "/api/v1"


def _start(backend: Any, job_id: int, *, instances: list[tuple[str, InstanceStatus, float | None]] = ()) -> None:
    """Job -> running; instance rows (id, status, heartbeat age in s or None for never)."""
    now = datetime.now(UTC)
    with backend.session() as session:
        job = session.get(Job, job_id)
        transition_job(session=session, job=job, to=JobStatus.starting)
        transition_job(session=session, job=job, to=JobStatus.running)
        for name, status, age in instances:
            beat = None if age is None else now - timedelta(seconds=age)
            session.add(GenerationInstance(job_id=job_id, instance_id=name, status=status, heartbeat_at=beat,
                                           stopped_at=now if status == InstanceStatus.dead else None))


def _health(client: TestClient, world: Any, job_id: int) -> dict[str, Any]:
    answer = client.get(f"{API}/jobs/{job_id}/health", headers=world.headers("viewer"))
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_never_started_instance_is_pending_not_running(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, generation={"instances": 3})
    running = InstanceStatus.running
    _start(world.backend, job["id"], instances=[("gen-0", running, 1), ("gen-1", running, 2),
                                                ("gen-2", InstanceStatus.starting, None)])
    health = _health(app_client, world, job["id"])
    assert health["state"] == "waiting_for_instances" and not health["healthy"]
    assert health["instances"] | {"oldest_pending_s": None} == {
        "target": 3, "running": 2, "pending": 1, "silent": 0, "dead_recent": 0, "oldest_pending_s": None}
    assert health["summary"] == "2 of 3 instances running, 1 pending"


def test_reward_errors_stall_and_crash_loop(app_client: TestClient, world: Any) -> None:
    broken = world.submit(app_client, name="broken", generation={"instances": 1})
    _start(world.backend, broken["id"], instances=[("gen-0", InstanceStatus.running, 1)])
    with world.backend.session() as session:
        record_iteration(session=session, job_id=broken["id"], iteration=1, metrics={"reward_errors": 0.0})
        record_iteration(session=session, job_id=broken["id"], iteration=2, metrics={"reward_errors": 8.0})
        record_event(session=session, job_id=broken["id"], kind="reward_error",
                     message="reward 'exact_match' failed: KeyError: 'answer'")
    health = _health(app_client, world, broken["id"])
    assert health["state"] == "reward_errors" and not health["healthy"]
    assert health["latest_error"] == "reward 'exact_match' failed: KeyError: 'answer'"
    assert (health["reward_errors_latest"], health["reward_errors_total"]) == (8, 8)

    stalled = world.submit(app_client, name="stalled", generation={"instances": 1})
    _start(world.backend, stalled["id"], instances=[("gen-0", InstanceStatus.running, 1)])
    with world.backend.session() as session:
        session.get(Job, stalled["id"]).started_at = datetime.now(UTC) - timedelta(seconds=MIN_STALL_S + 60)
    health = _health(app_client, world, stalled["id"])
    assert health["state"] == "stalled" and health["seconds_since_progress"] > MIN_STALL_S

    looping = world.submit(app_client, name="looping", generation={"instances": 1})
    dead = [(f"gen-{i}", InstanceStatus.dead, 90.0) for i in range(3)]
    _start(world.backend, looping["id"], instances=[*dead, ("gen-3", InstanceStatus.starting, None)])
    with world.backend.session() as session:
        record_event(session=session, job_id=looping["id"], kind="worker", message="instance gen-2 stopped beating")
    health = _health(app_client, world, looping["id"])
    assert health["state"] == "crash_looping" and health["latest_error"] == "instance gen-2 stopped beating"


def test_stall_limit_follows_the_iteration_pace() -> None:
    now = datetime.now(UTC)
    assert stall_limit([]) == MIN_STALL_S
    slow = [now - timedelta(seconds=100 * i) for i in range(5)]  # an iteration every 100 s
    assert stall_limit(slow) == 500.0


def test_runs_table_is_one_request_with_a_fixed_number_of_queries(
    app_client: TestClient, world: Any, pg_backend: Any
) -> None:
    ids = [world.submit(app_client, name=f"run-{i}")["id"] for i in range(6)]
    for job_id in ids[:3]:
        _start(world.backend, job_id)
        with world.backend.session() as session:
            record_iteration(session=session, job_id=job_id, iteration=1, metrics={"reward_mean": 0.5,
                                                                                  "eval_reward": 0.25})
            record_iteration(session=session, job_id=job_id, iteration=2, metrics={"reward_mean": 0.7})
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(pg_backend.engine, "before_cursor_execute", listener)
    try:
        small = app_client.get(f"{API}/runs", params={"limit": 2}, headers=world.headers("viewer"))
        few = len(statements)
        statements.clear()
        runs = app_client.get(f"{API}/runs", headers=world.headers("viewer"))
    finally:
        event.remove(pg_backend.engine, "before_cursor_execute", listener)
    assert small.status_code == runs.status_code == 200
    assert len(statements) == few  # 6 jobs cost the same queries as 2
    rows = {row["id"]: row for row in runs.json()["data"]}
    assert set(ids) <= set(rows)
    assert rows[ids[0]]["eval_reward"] == 0.25 and rows[ids[0]]["latest_metrics"] == {"reward_mean": 0.7}
    assert rows[ids[0]]["duration_s"] is not None and rows[ids[5]]["duration_s"] is None
    assert rows[ids[5]]["health"]["state"] == "queued"


def test_spec_yaml_round_trips(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="yaml-job", generation={"instances": 2})
    answer = app_client.get(f"{API}/jobs/{job['id']}/spec.yaml", headers=world.headers("viewer"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(answer.text) == job["spec"]
    again = app_client.post(f"{API}/jobs", json=yaml.safe_load(answer.text), headers=world.headers("member"))
    assert again.status_code == 201 and again.json()["spec"] == job["spec"]


def test_exports_match_the_recorded_data_and_are_team_scoped(
    app_client: TestClient, world: Any, other_world: Any
) -> None:
    job = world.submit(app_client, name="export-me")
    with world.backend.session() as session:
        record_iteration(session=session, job_id=job["id"], iteration=1, metrics={"reward_mean": 0.1, "kl": 0.01})
        record_iteration(session=session, job_id=job["id"], iteration=2, metrics={"reward_mean": 0.3})
    headers = world.headers("viewer")
    iterations = app_client.get(f"{API}/jobs/{job['id']}/iterations", headers=headers).json()["data"]
    csv_answer = app_client.get(f"{API}/jobs/{job['id']}/export/metrics.csv", headers=headers)
    assert csv_answer.headers["content-disposition"] == f'attachment; filename="job-{job["id"]}-metrics.csv"'
    rows = list(csv.DictReader(io.StringIO(csv_answer.text)))
    assert list(rows[0]) == ["iteration", "created_at", "kl", "reward_mean"]
    assert [(r["iteration"], r["reward_mean"], r["kl"]) for r in rows] == [("1", "0.1", "0.01"), ("2", "0.3", "")]
    json_answer = app_client.get(f"{API}/jobs/{job['id']}/export/metrics.json", headers=headers).json()
    assert json_answer == iterations
    jsonl = app_client.get(f"{API}/jobs/{job['id']}/export/events.jsonl", headers=headers).text
    assert [json.loads(line)["kind"] for line in jsonl.splitlines()] == ["created"]
    foreign = app_client.get(f"{API}/jobs/{job['id']}/export/metrics.csv", headers=other_world.headers("owner"))
    assert foreign.status_code == 404


def test_checkpoint_tar_streams_the_directory(app_client: TestClient, world: Any, other_world: Any) -> None:
    job = world.submit(app_client, name="ckpt")
    directory = world.backend.settings.artifacts / "checkpoints" / f"job-{job['id']}" / "iter-2"
    (directory / "sub").mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "llama"}')
    (directory / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 5000)  # not a multiple of 512
    with world.backend.session() as session:
        record_checkpoint(session=session, job_id=job["id"], iteration=2, path=str(directory))
        record_checkpoint(session=session, job_id=job["id"], iteration=3, path="/etc")
    url = f"{API}/jobs/{job['id']}/export/checkpoints"
    answer = app_client.get(f"{url}/2.tar", headers=world.headers("viewer"))
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as archive:
        names = sorted(archive.getnames())
        weights = archive.extractfile(f"job-{job['id']}-iter-2/sub/weights.bin")
        assert weights is not None and weights.read() == bytes(range(256)) * 5000
    assert names == [f"job-{job['id']}-iter-2" + tail for tail in ("", "/config.json", "/sub", "/sub/weights.bin")]
    outside = app_client.get(f"{url}/3.tar", headers=world.headers("viewer"))
    assert outside.status_code == 404 and "not on this server" in outside.json()["detail"]
    assert app_client.get(f"{url}/9.tar", headers=world.headers("viewer")).status_code == 404
    assert app_client.get(f"{url}/2.tar", headers=other_world.headers("owner")).status_code == 404


def test_checkpoint_exports_the_merged_model_or_the_adapter(app_client: TestClient, world: Any) -> None:
    """form=merged: the HF model files alone (no resumable state); form=adapter: a LoRA job's PEFT directory, a 404
    naming the reason for a job that trained every weight."""
    job = world.submit(app_client, name="lora-ckpt")
    lora_dir = world.backend.settings.artifacts / "checkpoints" / f"job-{job['id']}" / "iter-4"
    full_dir = lora_dir.with_name("iter-5")
    for directory in (lora_dir, full_dir):
        directory.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt"):
            (directory / name).write_text(name)
    (lora_dir / "adapter").mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (lora_dir / "adapter" / name).write_text(name)
    with world.backend.session() as session:
        record_checkpoint(session=session, job_id=job["id"], iteration=4, path=str(lora_dir))
        record_checkpoint(session=session, job_id=job["id"], iteration=5, path=str(full_dir))
    url, headers = f"{API}/jobs/{job['id']}/export/checkpoints", world.headers("viewer")

    def names(answer: Any) -> list[str]:
        assert answer.status_code == 200, answer.text
        with tarfile.open(fileobj=io.BytesIO(answer.content)) as archive:
            return sorted(archive.getnames())

    merged = app_client.get(f"{url}/4.tar?form=merged", headers=headers)
    prefix = f"job-{job['id']}-iter-4-merged"
    assert merged.headers["content-disposition"] == f'attachment; filename="{prefix}.tar"'
    assert names(merged) == [prefix] + [f"{prefix}/{n}" for n in ("config.json", "model.safetensors", "tokenizer.json")]
    prefix = f"job-{job['id']}-iter-4-adapter"
    assert names(app_client.get(f"{url}/4.tar?form=adapter", headers=headers)) == [
        prefix, f"{prefix}/adapter_config.json", f"{prefix}/adapter_model.safetensors"]
    whole = names(app_client.get(f"{url}/4.tar", headers=headers))
    assert f"job-{job['id']}-iter-4/trainer_state.pt" in whole and f"job-{job['id']}-iter-4/adapter" in whole
    no_adapter = app_client.get(f"{url}/5.tar?form=adapter", headers=headers)
    assert no_adapter.status_code == 404 and "holds no LoRA adapter" in no_adapter.json()["detail"]
    assert app_client.get(f"{url}/4.tar?form=weights", headers=headers).status_code == 422


def test_spec_yaml_shows_python_code_as_a_block(app_client: TestClient, world: Any) -> None:
    code = 'def reward(prompt, response, meta):\n    return float("a" in response)\n'
    job = world.submit(app_client, name="code-job", reward={"type": "python", "code": code})
    answer = app_client.get(f"{API}/jobs/{job['id']}/spec.yaml", headers=world.headers("viewer"))
    block = '  code: |\n    def reward(prompt, response, meta):\n        return float("a" in response)\n'
    assert block in answer.text
    assert yaml.safe_load(answer.text) == job["spec"]


def test_checkpoint_list_offers_only_what_exists_on_disk(app_client: TestClient, world: Any) -> None:
    """A checkpoint whose directory was deleted (retention, by hand) is not listed: nothing could load it."""
    job = world.submit(app_client, name="ckpt-on-disk")
    base = world.backend.settings.artifacts / "checkpoints" / f"job-{job['id']}"
    for iteration in (1, 2, 3):
        (base / f"iter-{iteration}").mkdir(parents=True)
        with world.backend.session() as session:
            record_checkpoint(session=session, job_id=job["id"], iteration=iteration,
                              path=str(base / f"iter-{iteration}"))
    (base / "iter-2").rmdir()
    answer = app_client.get(f"{API}/jobs/{job['id']}/checkpoints", headers=world.headers("viewer"))
    assert answer.status_code == 200, answer.text
    assert [c["iteration"] for c in answer.json()["data"]] == [1, 3]
