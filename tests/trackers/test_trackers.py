"""Experiment trackers fed by the control plane from recorded iteration rows: a real `mlflow server` (metrics per
iteration, the spec as params and spec.json, the final checkpoint as artifacts, the run's final status), W&B in
offline mode (its run directory and the history records in it), TensorBoard event files (read back with
tensorboard's own reader). Credentials are the team's, write-only; a tracker that goes down is an event, the job goes
on, and the buffered iterations arrive when it is back."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from sqlalchemy import select
from tracker_servers import MlflowServer
from waiting import wait_until

from backend.db.enums import JobStatus, Role
from backend.db.models import Checkpoint, Job, JobEvent, Model, TrackerRun
from backend.services.job_data import record_iteration
from backend.trackers.sync import OpenSinks, sync_trackers

TOKEN = "mlflow-token-never-shown"
LOOPBACK = "127.0.0.1"  # the operator's egress allow-list names the test's mlflow server (backend/services/egress.py)


def allowed(backend: Any) -> Any:
    """The backend's settings with the test servers' address on the egress allow-list."""
    return backend.settings.model_copy(update={"egress_allow": LOOPBACK})


def _team(backend: Any, tmp_path: Path) -> tuple[Any, dict[str, str]]:
    team = backend.make_team()
    headers = backend.auth_headers(backend.make_user(team, Role.admin), team)
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with backend.session() as session:
        session.add(Model(team_id=team.id, name="tiny", path=str(model_dir)))
    return team, headers


def _submit(client: Any, headers: dict[str, str], trackers: list[dict[str, Any]], name: str) -> int:
    spec = {"name": name, "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
            "training": {"iterations": 3, "lr": 0.002}, "telemetry": {"trackers": trackers}}
    answer = client.post("/api/v1/jobs", json=spec, headers=headers)
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def _iterate(backend: Any, job_id: int, iterations: range) -> None:
    with backend.session() as session:
        session.get(Job, job_id).status = JobStatus.running  # type: ignore[union-attr]
        for it in iterations:
            record_iteration(session=session, job_id=job_id, iteration=it,
                             metrics={"reward_mean": 0.1 * it, "loss": 1.0 / it, "samples": 16, "lengths": [3, 5],
                                      "eval_reward": None})


def _finish(backend: Any, job_id: int, iteration: int) -> Path:
    ckpt = backend.settings.artifacts / "jobs" / str(job_id) / "checkpoints" / f"iter_{iteration}"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1024)
    with backend.session() as session:
        session.add(Checkpoint(job_id=job_id, iteration=iteration, path=str(ckpt)))
        session.get(Job, job_id).status = JobStatus.succeeded  # type: ignore[union-attr]
    return ckpt


def _sync_until_finished(backend: Any, job_id: int, sinks: OpenSinks) -> None:
    def finished() -> bool:
        sync_trackers(allowed(backend), sinks, backend.engine)
        with backend.session() as session:
            runs = session.scalars(select(TrackerRun).where(TrackerRun.job_id == job_id)).all()
            return bool(runs) and all(run.finished for run in runs)

    wait_until(finished, 120, "every tracker run to finish")


def _wandb_records(run_dir: Path) -> list[Any]:
    """The records of an offline run's `run-<id>.wandb`: a 7-byte header, then LevelDB-log blocks of 32 KiB whose
    records (7-byte header: crc, length, type full/first/middle/last) hold `Record` protobufs."""
    from wandb.proto import wandb_internal_pb2

    [log] = run_dir.glob("run-*.wandb")
    data, block, pos = log.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    chunks: list[bytes] = []
    pending = b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (length == 0 and kind == 0):
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            chunks.append(pending)
    records = []
    for chunk in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        records.append(record)
    return records


def _wandb_history(records: list[Any]) -> list[dict[str, Any]]:
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for record in records if record.WhichOneof("record_type") == "history"]


def test_mlflow_wandb_tensorboard_from_recorded_iterations(pg_backend: Any, mlflow_server: MlflowServer,
                                                          tmp_path: Path) -> None:
    _, headers = _team(pg_backend, tmp_path)
    with pg_backend.client(egress_allow=LOOPBACK) as client:
        put = client.put("/api/v1/trackers/mlflow", headers=headers,
                         json={"tracking_uri": mlflow_server.url, "token": TOKEN})
        assert put.status_code == 200, put.text
        assert put.json()["secrets"] == {"token": True, "password": False} and TOKEN not in put.text
        listed = client.get("/api/v1/trackers", headers=headers)
        assert TOKEN not in listed.text and listed.json()["data"][0]["tracking_uri"] == mlflow_server.url
        job_id = _submit(client, headers, [{"type": "mlflow", "experiment": "rl-exp"},
                                           {"type": "wandb", "mode": "offline", "project": "rl"},
                                           {"type": "tensorboard"}], "tracked")
        _iterate(pg_backend, job_id, range(1, 3))
        sinks = OpenSinks()
        sync_trackers(allowed(pg_backend), sinks, pg_backend.engine)  # the run opens and takes 1..2 while running
        _iterate(pg_backend, job_id, range(3, 4))
        ckpt = _finish(pg_backend, job_id, 3)
        _sync_until_finished(pg_backend, job_id, sinks)
        runs = {r["tracker"]: r for r in client.get(f"/api/v1/jobs/{job_id}/trackers", headers=headers).json()["data"]}
    assert all(run["sent_iteration"] == 3 and run["finished"] and run["down_since"] is None for run in runs.values())

    mlflow = MlflowClient(mlflow_server.url)
    [run] = mlflow.search_runs([mlflow.get_experiment_by_name("rl-exp").experiment_id])
    assert run.info.run_id == runs["mlflow"]["run_ref"] and run.info.status == "FINISHED"
    assert run.info.run_name == "tracked" and run.data.tags["streamrl.job_id"] == str(job_id)
    history = mlflow.get_metric_history(run.info.run_id, "reward_mean")
    assert [(m.step, round(m.value, 6)) for m in history] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert "lengths" not in run.data.metrics and "eval_reward" not in run.data.metrics
    assert run.data.params["training.lr"] == "0.002" and run.data.params["telemetry.trackers"].startswith("[")
    assert {a.path for a in mlflow.list_artifacts(run.info.run_id)} == {"spec.json", "checkpoint"}
    assert {a.path for a in mlflow.list_artifacts(run.info.run_id, "checkpoint")} == \
        {"checkpoint/config.json", "checkpoint/model.safetensors"}
    local = Path(mlflow.download_artifacts(run.info.run_id, "checkpoint/model.safetensors", str(tmp_path)))
    assert local.read_bytes() == (ckpt / "model.safetensors").read_bytes()
    spec = json.loads(Path(mlflow.download_artifacts(run.info.run_id, "spec.json", str(tmp_path))).read_text())
    assert spec["name"] == "tracked" and spec["telemetry"]["trackers"][0]["experiment"] == "rl-exp"

    jobs_dir = pg_backend.settings.artifacts / "jobs" / str(job_id) / "trackers"
    [wandb_run] = (jobs_dir / "wandb" / "wandb").glob(f"offline-run-*-{runs['wandb']['run_ref']}")
    records = _wandb_records(wandb_run)
    steps = {row["_step"]: row for row in _wandb_history(records)}
    assert sorted(steps) == [1, 2, 3] and steps[2]["reward_mean"] == pytest.approx(0.2)
    [config] = [r.run.config for r in records if r.WhichOneof("record_type") == "run"]
    assert json.loads(next(item.value_json for item in config.update if item.key == "training"))["lr"] == 0.002
    assert records[-1].WhichOneof("record_type") == "exit" and records[-1].exit.exit_code == 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(jobs_dir / "tensorboard"))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("reward_mean")] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    assert [e.step for e in events.Scalars("loss")] == [1, 2, 3]


def test_tracker_outage_is_an_event_and_the_buffer_is_flushed(pg_backend: Any, mlflow_server: MlflowServer,
                                                              tmp_path: Path) -> None:
    _, headers = _team(pg_backend, tmp_path)
    with pg_backend.client(egress_allow=LOOPBACK) as client:
        assert client.put("/api/v1/trackers/mlflow", headers=headers,
                          json={"tracking_uri": mlflow_server.url}).status_code == 200
        job_id = _submit(client, headers, [{"type": "mlflow", "experiment": "outage"}], "outage")
    sinks = OpenSinks()
    _iterate(pg_backend, job_id, range(1, 3))
    sync_trackers(allowed(pg_backend), sinks, pg_backend.engine)
    mlflow_server.stop()
    try:
        _iterate(pg_backend, job_id, range(3, 6))  # the job goes on while the tracker is down
        sync_trackers(allowed(pg_backend), sinks, pg_backend.engine)
        with pg_backend.session() as session:
            run = session.scalar(select(TrackerRun).where(TrackerRun.job_id == job_id))
            assert run is not None and run.down_since is not None and run.sent_iteration == 2 and run.last_error
            job = session.get(Job, job_id)
            assert job is not None and job.status == JobStatus.running and job.current_iteration == 5
    finally:
        mlflow_server.start()

    def flushed() -> bool:
        sync_trackers(allowed(pg_backend), sinks, pg_backend.engine)
        with pg_backend.session() as session:
            run = session.scalar(select(TrackerRun).where(TrackerRun.job_id == job_id))
            return run is not None and run.sent_iteration == 5 and run.down_since is None

    wait_until(flushed, 120, "the buffered iterations to reach MLflow")
    with pg_backend.session() as session:
        messages = [e.message for e in session.scalars(select(JobEvent).where(
            JobEvent.job_id == job_id, JobEvent.kind == "tracker").order_by(JobEvent.id))]
    assert len(messages) == 2 and "unreachable" in messages[0] and "buffered" in messages[0]
    assert "reachable again" in messages[1]
    mlflow = MlflowClient(mlflow_server.url)
    [run_info] = mlflow.search_runs([mlflow.get_experiment_by_name("outage").experiment_id])
    assert [m.step for m in mlflow.get_metric_history(run_info.info.run_id, "reward_mean")] == [1, 2, 3, 4, 5]
    with pg_backend.session() as session:
        session.get(Job, job_id).status = JobStatus.cancelled  # type: ignore[union-attr]
    _sync_until_finished(pg_backend, job_id, sinks)
    assert MlflowClient(mlflow_server.url).get_run(run_info.info.run_id).info.status == "KILLED"


def test_credentials_are_team_scoped_and_checked_at_submit(pg_backend: Any, tmp_path: Path) -> None:
    team, headers = _team(pg_backend, tmp_path)
    other = pg_backend.make_team()
    other_headers = pg_backend.auth_headers(pg_backend.make_user(other, Role.owner), other)
    member = pg_backend.auth_headers(pg_backend.make_user(team, Role.member), team)
    with pg_backend.client(egress_allow=LOOPBACK) as client:
        spec = {"name": "x", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
                "telemetry": {"trackers": [{"type": "wandb", "project": "p"}]}}
        refused = client.post("/api/v1/jobs", json=spec, headers=headers)
        assert refused.status_code == 422 and "API key" in refused.text and "trackers" in refused.text
        spec["telemetry"] = {"trackers": [{"type": "mlflow"}]}
        assert "no MLflow connection" in client.post("/api/v1/jobs", json=spec, headers=headers).text
        spec["telemetry"] = {"trackers": [{"type": "tensorboard", "project": "p"}]}
        assert "wandb setting" in client.post("/api/v1/jobs", json=spec, headers=headers).text
        spec["telemetry"] = {"trackers": [{"type": "tensorboard"}, {"type": "tensorboard"}]}
        assert "at most once" in client.post("/api/v1/jobs", json=spec, headers=headers).text

        assert client.put("/api/v1/trackers/wandb", json={"api_key": "k" * 40}, headers=member).status_code == 403
        put = client.put("/api/v1/trackers/wandb", json={"api_key": "k" * 40, "entity": "lab"}, headers=headers)
        assert put.status_code == 200 and put.json()["secrets"] == {"api_key": True} and "k" * 40 not in put.text
        assert client.put("/api/v1/trackers/wandb", json={"tracking_uri": "http://x"}, headers=headers
                          ).status_code == 422
        kept = client.put("/api/v1/trackers/wandb", json={"entity": "lab2"}, headers=headers).json()
        assert kept["secrets"] == {"api_key": True} and kept["entity"] == "lab2"  # an omitted secret is kept
        assert client.get("/api/v1/trackers", headers=other_headers).json()["count"] == 0
        assert client.delete("/api/v1/trackers/wandb", headers=other_headers).status_code == 404
        spec["telemetry"] = {"trackers": [{"type": "wandb", "project": "p"}]}
        job = client.post("/api/v1/jobs", json=spec, headers=headers)
        assert job.status_code == 201, job.text
        assert client.get(f"/api/v1/jobs/{job.json()['id']}/trackers", headers=other_headers).status_code == 404
        assert client.delete("/api/v1/trackers/wandb", headers=headers).status_code == 204
        with pg_backend.session() as session:
            session.get(Job, job.json()["id"]).status = JobStatus.cancelled  # type: ignore[union-attr]
            for run in session.scalars(select(TrackerRun).where(TrackerRun.job_id == job.json()["id"])):
                run.finished = True  # never opened: nothing for later tests' sync passes
