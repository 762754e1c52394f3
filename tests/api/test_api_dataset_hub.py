"""One split of a Hub dataset registered through the REST API (POST /datasets/hub), served by a local file server in
the Hub's URL layout (tests/hub_server.py): Parquet shards and JSONL splits import their rows; a bad row, an unknown
split and an offline host each fail the dataset with a clear reason and keep no file; a job on a dataset that is not
ready is refused naming its state."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from hub_server import HubServer

from backend.db.models import Dataset

API = "/api/v1"
JOB = {"model": "tiny", "dataset": {"id": 0}}


def chat(question: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question},
            {"role": "assistant", "content": answer}]


@pytest.fixture(scope="module")
def dataset_repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub-datasets")
    chats = root / "chats"
    (chats / "data").mkdir(parents=True)
    for shard, start in [(0, 0), (1, 3)]:  # the Hub's layout: data/<split>-<shard>-of-<n>.parquet
        rows = [{"messages": chat(f"{n} + 1?", str(n + 1)), "answer": str(n + 1)} for n in range(start, start + 3)]
        pq.write_table(pa.Table.from_pylist(rows), chats / "data" / f"train-0000{shard}-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "2 + 2?", "answer": "4"}]),
                   chats / "data" / "test-00000-of-00001.parquet")
    (chats / "README.md").write_text("# chats\n")
    prompts = root / "prompts"
    prompts.mkdir()
    (prompts / "train.jsonl").write_text("".join(json.dumps({"prompt": f"say {w}", "word": w}) + "\n"
                                                 for w in ("a", "b")))
    broken = root / "broken"
    broken.mkdir()
    (broken / "train.jsonl").write_text(json.dumps({"prompt": "fine"}) + "\n"
                                        + json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    return {"acme/chats": chats, "acme/prompts": prompts, "acme/broken": broken}


def wait_state(client: TestClient, headers: dict[str, str], dataset_id: int, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dataset = client.get(f"{API}/datasets/{dataset_id}", headers=headers).json()
        if dataset["state"] != "downloading":
            return dataset
        time.sleep(0.1)
    raise AssertionError(f"dataset {dataset_id} still downloading after {timeout_s}s: {dataset}")


def register(client: TestClient, headers: dict[str, str], name: str, hub_id: str, split: str,
             **extra: str) -> dict[str, Any]:
    created = client.post(f"{API}/datasets/hub", json={"name": name, "hub_id": hub_id, "split": split, **extra},
                          headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "downloading" and created.json()["source"] == "hub"
    return wait_state(client, headers, created.json()["id"])


def test_hub_datasets_import_their_split_and_fail_clearly(pg_backend: Any, world: Any,
                                                          dataset_repos: dict[str, Path]) -> None:
    member, artifacts = world.headers("member"), world.backend.settings.artifacts
    with HubServer({}, datasets=dataset_repos) as hub, \
            pg_backend.client(hub_endpoint=hub.url, egress_allow="127.0.0.1") as client:  # a loopback mirror
        train = register(client, member, "chats-train", "acme/chats", "train", revision="main")
        assert train["state"] == "ready" and train["row_count"] == 6, train
        assert (train["hub_id"], train["revision"], train["split"]) == ("acme/chats", "main", "train")
        rows = client.get(f"{API}/datasets/{train['id']}/rows", headers=member).json()
        assert rows["count"] == 6 and [r["answer"] for r in rows["data"]] == ["1", "2", "3", "4", "5", "6"]
        assert rows["data"][0]["messages"] == chat("0 + 1?", "1")
        assert hub.downloads == {"data/train-00000-of-00002.parquet": 1, "data/train-00001-of-00002.parquet": 1}
        prompts = register(client, member, "prompts", "acme/prompts", "train")
        assert prompts["state"] == "ready" and prompts["row_count"] == 2, prompts
        got = client.get(f"{API}/datasets/{prompts['id']}/rows", headers=member).json()["data"]
        assert got == [{"prompt": "say a", "word": "a"}, {"prompt": "say b", "word": "b"}]
        accepted = client.post(f"{API}/jobs", headers=member, json={**JOB, "dataset": {"id": prompts["id"]}})
        assert accepted.status_code == 201, accepted.text

        broken = register(client, member, "broken", "acme/broken", "train")
        assert broken["state"] == "failed" and broken["row_count"] == 0, broken
        assert broken["error"].startswith("train.jsonl: line 2") and "user" in broken["error"], broken["error"]
        unknown = register(client, member, "validation", "acme/chats", "validation")
        assert unknown["state"] == "failed"
        assert unknown["error"] == "no files for split 'validation' in acme/chats; splits found: test, train"
        missing = register(client, member, "missing", "acme/nothing", "train")
        assert missing["state"] == "failed" and "no such dataset on" in missing["error"], missing
        refused = client.post(f"{API}/jobs", headers=member, json={**JOB, "dataset": {"id": broken["id"]}})
        assert refused.status_code == 422
        assert f"dataset {broken['id']} is failed, not ready: train.jsonl: line 2" in refused.json()["detail"][0]["msg"]
        assert client.get(f"{API}/datasets/{broken['id']}/rows", headers=member).status_code == 422
        bad_id = client.post(f"{API}/datasets/hub", json={"name": "x", "hub_id": "../etc", "split": "train"},
                             headers=member)
        assert bad_id.status_code == 422 and bad_id.json()["detail"][0]["loc"] == ["body", "hub_id"]
        bad_split = client.post(f"{API}/datasets/hub", json={"name": "x", "hub_id": "acme/chats", "split": "../x"},
                                headers=member)
        assert bad_split.status_code == 422 and bad_split.json()["detail"][0]["loc"] == ["body", "split"]

    with pg_backend.client(hub_endpoint="http://127.0.0.1:9", egress_allow="127.0.0.1") as offline:  # nothing listens
        started = time.monotonic()
        failed = register(offline, member, "offline", "acme/chats", "train")
        assert failed["state"] == "failed" and "this host is offline" in failed["error"], failed
        assert "Upload the dataset file instead" in failed["error"] and time.monotonic() - started < 30
    with pg_backend.client(hub_endpoint="http://127.0.0.1:9") as unlisted:  # the default egress policy: refused
        failed = register(unlisted, member, "internal", "acme/chats", "train")
        assert failed["state"] == "failed" and "refused by the egress policy" in failed["error"], failed
    team_dir = artifacts / "datasets" / str(world.team.id)
    kept = sorted(p.name for p in team_dir.iterdir())
    assert kept == sorted([f"{train['id']}.jsonl", f"{prompts['id']}.jsonl"])  # no file of a failed dataset, no .hub


def test_a_job_on_a_dataset_that_is_not_ready_names_its_state(app_client: TestClient, world: Any,
                                                             tmp_path: Path) -> None:
    with world.backend.session() as session:  # an API started later on this database may resume it: a private path
        pending = Dataset(team_id=world.team.id, name="pending", row_count=0, checksum="", size_bytes=0,
                          storage_path=str(tmp_path / "pending.jsonl"), state="downloading", source="hub",
                          hub_id="acme/x", revision="main", split="train")
        session.add(pending)
        session.flush()
        pending_id = pending.id
    refused = app_client.post(f"{API}/jobs", headers=world.headers("member"),
                              json={**JOB, "dataset": {"id": pending_id}})
    assert refused.status_code == 422
    assert f"dataset {pending_id} is downloading, not ready (wait until it is ready)" in \
        refused.json()["detail"][0]["msg"]
    listed = app_client.get(f"{API}/datasets", headers=world.headers("viewer")).json()["data"]
    assert [d["state"] for d in listed if d["id"] == pending_id] == ["downloading"]


def test_an_import_writes_only_in_its_team_directory(pg_backend: Any, world: Any, tmp_path: Path) -> None:
    """A row whose path is outside this server's `<artifacts>/datasets/<team>/` (another deployment's, on a shared
    database) is left alone: nothing created or chmod-ed there, the row unchanged."""
    from sqlalchemy.orm import sessionmaker

    from backend.services import dataset_hub
    from backend.services.egress import policy_of

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    outside.chmod(0o755)  # mkdir's mode is filtered by the umask (a CLI test in this process may have tightened it)
    with world.backend.session() as session:
        row = Dataset(team_id=world.team.id, name="elsewhere", row_count=0, checksum="", size_bytes=0,
                      storage_path=str(outside / "1.jsonl"), state="downloading", source="hub", hub_id="acme/x",
                      revision="main", split="train")
        session.add(row)
        session.flush()
        row_id = row.id
    dataset_hub.import_dataset(sessionmaker(world.backend.engine), row_id,
                               artifact_dir=world.backend.settings.artifacts, endpoint="http://127.0.0.1:9",
                               token=None, max_bytes=1 << 20, policy=policy_of(world.backend.settings))
    assert list(outside.iterdir()) == [] and outside.stat().st_mode & 0o777 == 0o755
    with world.backend.session() as session:
        assert session.get(Dataset, row_id).state == "downloading"
