"""Bring your own model through the REST API: a Llama and a Qwen2 chat model (BPE tokenizer, chat template) built
locally and registered from a directory, from an uploaded archive and from the Hub path (a local file server in the
Hub's URL layout, tests/hub_server.py); the card; state; bad input is a 422 that registers nothing."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hub_server import HubServer
from sqlalchemy import select

from backend.db.models import Model, Team

API = "/api/v1"


@pytest.fixture(scope="module")
def chat_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from workers.models import build_tiny_model

    root = tmp_path_factory.mktemp("byom")
    return {family: build_tiny_model(f"chat-{family}-1m", root / family) for family in ("llama", "qwen2")}


def tar_gz(source: Path, top: str = "model", extra: Any = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(source, arcname=top)
        if extra is not None:
            extra(tar)
    return buffer.getvalue()


def zipped(source: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(source.rglob("*")):
            archive.write(path, path.relative_to(source).as_posix())
    return buffer.getvalue()


def upload(client: TestClient, headers: dict[str, str], name: str, content: bytes, filename: str) -> Any:
    return client.post(f"{API}/models/upload", data={"name": name}, files={"file": (filename, content)},
                       headers=headers)


def wait_state(client: TestClient, headers: dict[str, str], model_id: int, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        model = client.get(f"{API}/models/{model_id}", headers=headers).json()
        if model["state"] != "downloading":
            return model
        time.sleep(0.1)
    raise AssertionError(f"model {model_id} still downloading after {timeout_s}s: {model}")


def check_card(card: dict[str, Any], architecture: str) -> None:
    assert card["architecture"] == architecture and card["vocab_size"] == 1024 and card["context_length"] == 1024
    assert card["chat_template"] is True and card["dtype"] == "float32"
    assert 1.0e6 < card["parameters"] < 1.2e6 and card["disk_bytes"] > 4 * card["parameters"]


def test_chat_models_from_a_directory_and_an_archive(app_client: TestClient, world: Any, other_world: Any,
                                                     chat_dirs: dict[str, Path]) -> None:
    member, artifacts = world.headers("member"), world.backend.settings.artifacts
    shared = artifacts / "models" / f"llama-{world.team.id}"
    shutil.copytree(chat_dirs["llama"], shared)
    created = app_client.post(f"{API}/models", json={"name": "llama-dir", "path": str(shared)}, headers=member)
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "ready" and created.json()["source"] == "directory"
    check_card(created.json()["card"], "LlamaForCausalLM")

    from_tar = upload(app_client, member, "qwen-tar", tar_gz(chat_dirs["qwen2"]), "qwen.tar.gz")
    assert from_tar.status_code == 201, from_tar.text
    check_card(from_tar.json()["card"], "Qwen2ForCausalLM")
    stored = Path(from_tar.json()["path"])
    assert stored.is_relative_to(artifacts.resolve() / "team-models" / str(world.team.id))
    assert (stored / "tokenizer.json").read_bytes() == (chat_dirs["qwen2"] / "tokenizer.json").read_bytes()
    from_zip = upload(app_client, member, "llama-zip", zipped(chat_dirs["llama"]), "llama.zip")
    assert from_zip.status_code == 201, from_zip.text
    check_card(from_zip.json()["card"], "LlamaForCausalLM")

    fetched = app_client.get(f"{API}/models/{from_tar.json()['id']}", headers=world.headers("viewer"))
    assert fetched.json() == from_tar.json()
    assert app_client.get(f"{API}/models/{from_tar.json()['id']}", headers=other_world.headers("owner")).status_code \
        == 404
    exported = app_client.get(f"{API}/models/{from_tar.json()['id']}/export.tar", headers=world.headers("viewer"))
    assert exported.status_code == 200, exported.text
    with tarfile.open(fileobj=io.BytesIO(exported.content)) as archive:
        names = archive.getnames()
        member_file = archive.extractfile("qwen-tar-v1/tokenizer.json")
        assert member_file is not None and member_file.read() == (stored / "tokenizer.json").read_bytes()
    assert sorted(n.split("/", 1)[1] for n in names if "/" in n) == sorted(p.name for p in stored.iterdir())
    assert app_client.get(f"{API}/models/{from_tar.json()['id']}/export.tar",
                          headers=other_world.headers("owner")).status_code == 404
    with world.backend.session() as session:  # a Hub download still running: nothing to download yet
        session.get(Model, from_zip.json()["id"]).state = "downloading"
    pending = app_client.get(f"{API}/models/{from_zip.json()['id']}/export.tar", headers=member)
    assert pending.status_code == 409 and "is downloading, not ready" in pending.json()["detail"]
    with world.backend.session() as session:
        session.get(Model, from_zip.json()["id"]).state = "ready"
    stolen = app_client.post(f"{API}/models", json={"name": "stolen", "path": str(stored)},
                             headers=other_world.headers("owner"))
    assert stolen.status_code == 422  # a team's uploaded model is not a shared path
    submitted = app_client.post(f"{API}/jobs", headers=member, json={
        "name": "chat", "model": "qwen-tar", "dataset": {"builtin": "arithmetic", "num_prompts": 8}})
    assert submitted.status_code == 201, submitted.text


def _bad_member(kind: str) -> Any:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("model/../../escape.txt" if kind == "dotdot" else "model/link")
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
    return add


def test_bad_models_are_422_and_register_nothing(app_client: TestClient, world: Any, chat_dirs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    member, artifacts = world.headers("member"), world.backend.settings.artifacts
    no_arch = tmp_path / "no-arch"
    shutil.copytree(chat_dirs["llama"], no_arch)
    config = json.loads((no_arch / "config.json").read_text())
    del config["architectures"]
    (no_arch / "config.json").write_text(json.dumps(config))
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(chat_dirs["qwen2"], no_tokenizer)
    (no_tokenizer / "tokenizer.json").unlink()
    cases = [
        ("dotdot", tar_gz(chat_dirs["llama"], extra=_bad_member("dotdot")), "`..`"),
        ("symlink", tar_gz(chat_dirs["llama"], extra=_bad_member("symlink")), "is a link"),
        ("no-arch", tar_gz(no_arch), "no `architectures`"),
        ("no-tokenizer", tar_gz(no_tokenizer), "no tokenizer"),
        ("not-an-archive", b"just some bytes", "not a tar or zip archive"),
    ]
    for name, content, reason in cases:
        refused = upload(app_client, member, name, content, f"{name}.tar.gz")
        assert refused.status_code == 422 and reason in refused.json()["detail"][0]["msg"], (name, refused.text)
    for name, source, reason in [("dir-no-arch", no_arch, "no `architectures`"),
                                 ("dir-no-tokenizer", no_tokenizer, "no tokenizer")]:
        target = artifacts / "models" / f"{name}-{world.team.id}"
        shutil.copytree(source, target)
        refused = app_client.post(f"{API}/models", json={"name": name, "path": str(target)}, headers=member)
        assert refused.status_code == 422 and reason in refused.json()["detail"][0]["msg"], refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "path"]
    with world.backend.session() as session:
        names = set(session.scalars(select(Model.name).where(Model.team_id == world.team.id)))
    assert names == {"tiny"}  # nothing half-registered
    team_dir = artifacts / "team-models" / str(world.team.id)
    assert not team_dir.exists() or not any(team_dir.iterdir())  # and no files left behind
    assert not (artifacts / "escape.txt").exists() and not (artifacts.parent / "escape.txt").exists()


def test_hub_registration_downloads_once_and_fails_clearly(pg_backend: Any, world: Any,
                                                           chat_dirs: dict[str, Path]) -> None:
    member, admin = world.headers("member"), world.headers("admin")
    with HubServer({"acme/llama-chat": chat_dirs["llama"], "acme/qwen-chat": chat_dirs["qwen2"]}) as hub, \
            pg_backend.client(hub_endpoint=hub.url, egress_allow="127.0.0.1") as client:  # a loopback mirror
        assert client.put(f"{API}/models/hub-token", json={"token": "hf_secret"}, headers=member).status_code == 403
        token = client.put(f"{API}/models/hub-token", json={"token": "hf_secret"}, headers=admin)
        assert token.json() == {"token_set": True} and "hf_secret" not in token.text
        assert client.get(f"{API}/models/hub-token/status", headers=member).json() == {"token_set": True}
        with pg_backend.session() as session:
            sealed = session.scalar(select(Team.hub_token_sealed).where(Team.id == world.team.id))
        assert sealed and "hf_secret" not in sealed  # stored encrypted
        started = {}
        for name, repo in [("llama-hub", "acme/llama-chat"), ("qwen-hub", "acme/qwen-chat")]:
            created = client.post(f"{API}/models", json={"name": name, "hub_id": repo, "revision": "main"},
                                  headers=member)
            assert created.status_code == 201 and created.json()["state"] == "downloading", created.text
            started[name] = created.json()["id"]
        llama = wait_state(client, member, started["llama-hub"])
        qwen = wait_state(client, member, started["qwen-hub"])
        assert (llama["state"], qwen["state"]) == ("ready", "ready"), (llama, qwen)
        check_card(llama["card"], "LlamaForCausalLM")
        check_card(qwen["card"], "Qwen2ForCausalLM")
        assert qwen["progress"]["done_bytes"] == qwen["progress"]["total_bytes"] == qwen["card"]["disk_bytes"]
        assert hub.downloads["model.safetensors"] == 2 and set(hub.authorizations) == {"Bearer hf_secret"}
        assert "hf_secret" not in json.dumps(client.get(f"{API}/models", headers=member).json())

        bad_revision = client.post(f"{API}/models", json={"name": "bad-rev", "hub_id": "acme/qwen-chat",
                                                          "revision": "v9"}, headers=member).json()
        failed = wait_state(client, member, bad_revision["id"])
        assert failed["state"] == "failed" and "no such revision" in failed["error"]
        refused = client.post(f"{API}/jobs", headers=member, json={
            "model": "bad-rev", "dataset": {"builtin": "arithmetic", "num_prompts": 8}})
        assert refused.status_code == 422 and "is failed, not ready" in refused.json()["detail"][0]["msg"]
        bad_id = client.post(f"{API}/models", json={"name": "x", "hub_id": "../etc"}, headers=member)
        assert bad_id.status_code == 422 and bad_id.json()["detail"][0]["loc"] == ["body", "hub_id"]

    with pg_backend.client(hub_endpoint="http://127.0.0.1:9", egress_allow="127.0.0.1") as offline:  # nothing listens
        created = offline.post(f"{API}/models", json={"name": "offline", "hub_id": "acme/qwen-chat"}, headers=member)
        failed = wait_state(offline, member, created.json()["id"], timeout_s=30)
        assert failed["state"] == "failed" and "this host is offline" in failed["error"], failed

    with pg_backend.client(hub_endpoint="http://127.0.0.1:9") as unlisted:  # the default egress policy: refused
        created = unlisted.post(f"{API}/models", json={"name": "internal", "hub_id": "acme/qwen-chat"}, headers=member)
        failed = wait_state(unlisted, member, created.json()["id"], timeout_s=30)
        assert failed["state"] == "failed" and "refused by the egress policy" in failed["error"], failed
        assert "STREAMRL_EGRESS_ALLOW" in failed["error"]


def test_a_job_on_a_model_that_is_not_ready_names_its_state(app_client: TestClient, world: Any) -> None:
    with world.backend.session() as session:
        session.add(Model(team_id=world.team.id, name="pending", path="/nonexistent/pending", state="downloading",
                          source="hub", hub_id="acme/x", revision="main"))
    refused = app_client.post(f"{API}/jobs", headers=world.headers("member"), json={
        "model": "pending", "dataset": {"builtin": "arithmetic", "num_prompts": 8}})
    assert refused.status_code == 422
    assert "model 'pending' is downloading, not ready" in refused.json()["detail"][0]["msg"]


def test_a_download_writes_only_in_its_team_model_directory(world: Any, tmp_path: Path) -> None:
    """A `downloading` row whose path is not this server's `<artifacts>/team-models/<team>/<model>/` (another
    deployment's, on a shared database) is left alone: no directory created there, the row unchanged."""
    from sqlalchemy.orm import sessionmaker

    from backend.services import model_hub
    from backend.services.egress import policy_of

    outside = tmp_path / "elsewhere" / "model"
    with world.backend.session() as session:
        row = Model(team_id=world.team.id, name="elsewhere", path=str(outside), state="downloading", source="hub",
                    hub_id="acme/x", revision="main")
        session.add(row)
        session.flush()
        row_id = row.id
    model_hub.download_model(sessionmaker(world.backend.engine), row_id, artifact_dir=world.backend.settings.artifacts,
                             endpoint="http://127.0.0.1:9", token=None, policy=policy_of(world.backend.settings))
    assert not outside.exists()
    with world.backend.session() as session:
        assert session.get(Model, row_id).state == "downloading"
        session.delete(session.get(Model, row_id))
