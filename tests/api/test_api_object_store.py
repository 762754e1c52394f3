"""The API with STREAMRL_ARTIFACTS=s3://... (a real SeaweedFS server, tests/object_store.py): uploaded datasets go to
the store under the team's prefix before the upload is answered, and so do uploaded models (a worker without the
API's disk reads them into its cache); a store that denies the credentials answers 503
and keeps nothing; a checkpoint that only the store holds (written on a worker host) is listed (from its manifest),
its files are served as presigned URLs (a redirect), it is exported as a tar stream and forked from, the fork's copy
stored under its own key."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.services.job_data import record_checkpoint
from contract.artifact_store import checkpoint_key, dataset_key, open_store
from contract.artifact_store.keys import model_key
from contract.artifact_store.models import local_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from object_store import SeaweedS3, shared_server  # noqa: E402

pytestmark = pytest.mark.integration
API = "/api/v1"
ROWS = b'{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "answer": "4"}\n'


@pytest.fixture(scope="module")
def seaweed() -> SeaweedS3:
    return shared_server()  # one server for every module of the session (tests/object_store.py)


def _use_store(monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedS3, prefix: str, **env: str) -> None:
    for name, value in {**seaweed.env(f"streamrl/{prefix}"), **env}.items():
        monkeypatch.setenv(name, value)


def _stored(seaweed: SeaweedS3, prefix: str) -> list[str]:
    listed = seaweed.client().list_objects_v2(Bucket="streamrl", Prefix=prefix).get("Contents", [])
    return [o["Key"] for o in listed]


def test_an_uploaded_dataset_goes_to_the_store(app_client: TestClient, world: Any, seaweed: SeaweedS3,
                                               monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _use_store(monkeypatch, seaweed, "api-datasets")
    answer = app_client.post(f"{API}/datasets", data={"name": "stored"}, files={"file": ("d.jsonl", ROWS)},
                             headers=world.headers("member"))
    assert answer.status_code == 201, answer.text
    dataset_id = answer.json()["id"]
    keys = _stored(seaweed, f"api-datasets/{dataset_key(world.team.id, dataset_id)}/")
    assert {k.rsplit("/", 1)[1] for k in keys} == {"MANIFEST.json", f"{dataset_id}.jsonl"}
    # a worker host without the API's disk reads the same bytes from the store
    store = open_store("s3://streamrl/api-datasets", tmp_path / "worker-cache")
    got = store.get_dir(dataset_key(world.team.id, dataset_id), tmp_path / "worker")
    assert (got / f"{dataset_id}.jsonl").read_bytes() == ROWS


def test_an_uploaded_model_goes_to_the_store_and_a_worker_reads_it(
        app_client: TestClient, world: Any, seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from workers.models import build_tiny_model

    _use_store(monkeypatch, seaweed, "api-models")
    source = build_tiny_model("tiny-1m", tmp_path_factory.mktemp("upload-model") / "m", seed=0)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.add(source, arcname="model")
    answer = app_client.post(f"{API}/models/upload", data={"name": "stored-model"},
                             files={"file": ("m.tar.gz", archive.getvalue())}, headers=world.headers("member"))
    assert answer.status_code == 201, answer.text
    model = answer.json()
    keys = _stored(seaweed, f"api-models/{model_key(world.team.id, model['id'])}/")
    assert f"api-models/{model_key(world.team.id, model['id'])}/config.json" in keys
    assert all(k.startswith(f"api-models/teams/{world.team.id}/") for k in keys)  # under the team's prefix
    # a worker host: the recorded directory is the API's, absent here; the store's copy is read into its cache
    recorded = tmp_path / "api-host" / "team-models" / str(world.team.id) / str(model["id"])
    got = local_model(world.team.id, recorded, tmp_path / "worker-artifacts")
    assert got == tmp_path / "worker-artifacts" / "cache" / "models" / str(world.team.id) / str(model["id"])
    assert (got / "config.json").read_bytes() == (source / "config.json").read_bytes()
    assert local_model(world.team.id, recorded.with_name("999999"), tmp_path / "w") == recorded.with_name("999999")


def test_a_hub_model_goes_to_the_store_and_is_exported_from_it(
        pg_backend: Any, world: Any, seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A Hub download is stored like an uploaded model; once the API's own copy is gone (another API host), the
    export streams the store's copy."""
    import shutil
    import time

    from hub_server import HubServer

    from workers.models import build_tiny_model

    _use_store(monkeypatch, seaweed, "api-hub")
    source = build_tiny_model("tiny-1m", tmp_path_factory.mktemp("hub-model") / "m", seed=0)
    member = world.headers("member")
    with HubServer({"acme/tiny": source}) as hub, \
            pg_backend.client(hub_endpoint=hub.url, egress_allow="127.0.0.1") as client:
        model = client.post(f"{API}/models", json={"name": "hub-stored", "hub_id": "acme/tiny"}, headers=member).json()
        deadline = time.monotonic() + 60
        while model["state"] == "downloading" and time.monotonic() < deadline:
            time.sleep(0.1)
            model = client.get(f"{API}/models/{model['id']}", headers=member).json()
        assert model["state"] == "ready", model
        key = model_key(world.team.id, model["id"])
        assert f"api-hub/{key}/config.json" in _stored(seaweed, f"api-hub/{key}/")
        shutil.rmtree(model["path"])  # the API host that downloaded it is not this one
        exported = client.get(f"{API}/models/{model['id']}/export.tar", headers=world.headers("viewer"))
    assert exported.status_code == 200, exported.text
    with tarfile.open(fileobj=io.BytesIO(exported.content)) as archive:
        config = archive.extractfile("hub-stored-v1/config.json")
        assert config is not None and config.read() == (source / "config.json").read_bytes()


def test_denied_credentials_answer_503_and_keep_nothing(app_client: TestClient, world: Any, seaweed: SeaweedS3,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _use_store(monkeypatch, seaweed, "api-denied", AWS_SECRET_ACCESS_KEY="wrong-secret")
    answer = app_client.post(f"{API}/datasets", data={"name": "denied"}, files={"file": ("d.jsonl", ROWS)},
                             headers=world.headers("member"))
    assert answer.status_code == 503, answer.text
    assert "denied the credentials" in answer.json()["detail"]
    listed = app_client.get(f"{API}/datasets", headers=world.headers("viewer")).json()["data"]
    assert "denied" not in {d["name"] for d in listed}
    assert not list((world.backend.settings.artifacts / "datasets" / str(world.team.id)).glob("*.jsonl"))


def test_a_checkpoint_only_the_store_holds_is_listed_exported_and_forked(
        app_client: TestClient, world: Any, other_world: Any, seaweed: SeaweedS3, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    _use_store(monkeypatch, seaweed, "api-ckpt")
    parent = world.submit(app_client, name="parent", training={"lr": 1e-3, "iterations": 6})["id"]
    worker_dir = tmp_path / "worker-host" / "iter_000002"  # written on another host: not under the API's dir
    worker_dir.mkdir(parents=True)
    (worker_dir / "model.safetensors").write_bytes(b"weights of iteration 2")
    (worker_dir / "config.json").write_text("{}")
    (worker_dir / "trainer_state.pt").write_bytes(b"optimizer state")
    store = open_store("s3://streamrl/api-ckpt", tmp_path / "worker-cache")
    store.put_dir(checkpoint_key(world.team.id, parent, "iter_000002"), worker_dir)
    with world.backend.session() as session:  # the path is the worker host's: this server has no such directory
        record_checkpoint(session=session, job_id=parent, iteration=2, path=f"/worker-host/{parent}/iter_000002")
        record_checkpoint(session=session, job_id=parent, iteration=4, path=f"/worker-host/{parent}/iter_000004")
    listed = app_client.get(f"{API}/jobs/{parent}/checkpoints", headers=world.headers("viewer"))
    assert [c["iteration"] for c in listed.json()["data"]] == [2], listed.text  # 4's manifest is not in the store
    files = app_client.get(f"{API}/jobs/{parent}/export/checkpoints/2/files", headers=world.headers("viewer"))
    assert files.json() == {"config.json": 2, "model.safetensors": 22, "trainer_state.pt": 15}, files.text
    shared = app_client.get(f"{API}/jobs/{parent}/export/checkpoints/2/files/model.safetensors",
                            headers=world.headers("viewer"), follow_redirects=False)
    assert shared.status_code == 307, shared.text  # a presigned URL: the bytes come from the store, not the API
    assert shared.headers["location"].startswith(seaweed.endpoint)
    assert httpx.get(shared.headers["location"]).content == b"weights of iteration 2"  # no credentials needed
    assert app_client.get(f"{API}/jobs/{parent}/export/checkpoints/2/files/../../x", follow_redirects=False,
                          headers=world.headers("viewer")).status_code == 404
    other = app_client.get(f"{API}/jobs/{parent}/export/checkpoints/2/files/model.safetensors",
                           headers=other_world.headers("viewer"), follow_redirects=False)
    assert other.status_code == 404  # another team's job
    exported = app_client.get(f"{API}/jobs/{parent}/export/checkpoints/2.tar", headers=world.headers("viewer"))
    assert exported.status_code == 200, exported.text
    with tarfile.open(fileobj=io.BytesIO(exported.content)) as tar:
        members = {m.name.rsplit("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
        weights = tar.extractfile(members["model.safetensors"])
        assert weights is not None and weights.read() == b"weights of iteration 2"
    fork = app_client.post(f"{API}/jobs/{parent}/fork", headers=world.headers("member"),
                           json={"iteration": 2, "overrides": {"training.lr": 5e-6}})
    assert fork.status_code == 201, fork.text
    forked = store.manifest(checkpoint_key(world.team.id, fork.json()["id"], "iter_000002"))
    assert forked is not None and "model.safetensors" in forked.files  # the fork's driver finds it on any host
