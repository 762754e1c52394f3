"""Dataset uploads (422 naming the bad line, 413 over the limit, nothing written on refusal) and model registration."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from minimal_model import write_minimal_model
from sqlalchemy import func, select

from backend.db.models import Dataset, Model

API = "/api/v1"


def _upload(client: TestClient, headers: dict[str, str], content: bytes, name: str = "prompts") -> Any:
    return client.post(
        f"{API}/datasets", data={"name": name}, files={"file": ("p.jsonl", io.BytesIO(content))}, headers=headers
    )


def _stored(backend: Any, team: Any) -> tuple[int, list[Path]]:
    with backend.session() as session:
        rows = session.scalar(select(func.count()).select_from(Dataset).where(Dataset.team_id == team.id))
    folder = backend.settings.artifacts / "datasets" / str(team.id)
    return rows, sorted(folder.glob("*")) if folder.exists() else []


def test_upload_validates_stores_and_serves_rows(app_client: TestClient, world: Any) -> None:
    lines = [json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) for i in range(5)]
    content = ("\n".join(lines) + "\n\n").encode()
    response = _upload(app_client, world.headers("member"), content)
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert dataset["row_count"] == 5 and dataset["size_bytes"] == len(content) and len(dataset["checksum"]) == 64
    rows, files = _stored(world.backend, world.team)
    assert rows == 1 and [f.name for f in files] == [f"{dataset['id']}.jsonl"]
    assert (files[0].stat().st_mode & 0o777, files[0].parent.stat().st_mode & 0o777) == (0o600, 0o700)
    page = app_client.get(
        f"{API}/datasets/{dataset['id']}/rows", params={"limit": 2, "offset": 1}, headers=world.headers("viewer")
    ).json()
    assert page["count"] == 5 and [r["answer"] for r in page["data"]] == ["2", "4"]
    job = world.submit(app_client, dataset={"id": dataset["id"]})
    assert job["spec"]["dataset"]["id"] == dataset["id"]


def test_duplicate_dataset_name_is_refused_and_writes_nothing(app_client: TestClient, world: Any) -> None:
    content = (json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n").encode()
    assert _upload(app_client, world.headers("member"), content, name="dup").status_code == 201
    again = _upload(app_client, world.headers("member"), content, name=" dup ")
    assert again.status_code == 409 and "a dataset named 'dup' already exists" in again.text, again.text
    rows, files = _stored(world.backend, world.team)
    assert rows == 1 and len(files) == 1


def test_bad_line_gives_422_naming_the_line_and_writes_nothing(app_client: TestClient, world: Any) -> None:
    member = world.headers("member")
    cases = {
        b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": ""}\n': "line 3",
        b'{"prompt": "a"}\nnot json\n': "line 2",
        b'["prompt"]\n': "line 1",
        b'{"prompt": "a"}\n{"question": "b"}\n': "line 2",
        b'{"prompt": "a"}\n\xff\xfe\n': "line 2",
    }
    for content, line in cases.items():
        response = _upload(app_client, member, content)
        assert response.status_code == 422, content
        detail = response.json()["detail"][0]
        assert detail["msg"].startswith(f"{line}:") and detail["loc"] == ["body", "file", line], detail
    empty = _upload(app_client, member, b"\n\n")
    assert empty.status_code == 422 and "no rows" in empty.json()["detail"][0]["msg"]
    assert _stored(world.backend, world.team) == (0, [])


def test_oversized_upload_gives_413_and_writes_nothing(pg_backend: Any, world: Any) -> None:
    content = b"".join(json.dumps({"prompt": "x" * 100}).encode() + b"\n" for _ in range(20))  # ~2.3 KB
    with pg_backend.client(max_upload_bytes=1000) as client:
        response = _upload(client, world.headers("member"), content)
        assert response.status_code == 413 and "1000 bytes" in response.json()["detail"]
        huge = _upload(client, world.headers("member"), content * 100)  # refused from Content-Length alone
        assert huge.status_code == 413
    assert _stored(world.backend, world.team) == (0, [])


def test_model_registration_only_from_allowed_roots(
    pg_backend: Any, world: Any, tmp_path: Path, app_client: TestClient
) -> None:
    member = world.headers("member")
    inside = write_minimal_model(pg_backend.settings.artifacts / "models" / "ok-model")
    created = app_client.post(f"{API}/models", json={"name": "ok", "path": "models/ok-model"}, headers=member)
    assert created.status_code == 201 and created.json()["path"] == str(inside.resolve())
    again = app_client.post(f"{API}/models", json={"name": "ok", "path": str(inside)}, headers=member)
    assert again.status_code == 201 and again.json()["version"] == 2  # a name again: its next version
    outside = write_minimal_model(tmp_path / "elsewhere")
    escape = pg_backend.settings.artifacts / "models" / "escape"
    escape.symlink_to(outside)
    no_config = pg_backend.settings.artifacts / "models" / "empty"
    no_config.mkdir()
    for name, path, reason in [
        ("a", str(outside), "outside the allowed model roots"),
        ("b", "../../../../etc", "outside the allowed model roots"),
        ("c", str(escape), "outside the allowed model roots"),
        ("d", str(no_config), "no config.json"),
    ]:
        refused = app_client.post(f"{API}/models", json={"name": name, "path": path}, headers=member)
        assert refused.status_code == 422 and reason in refused.json()["detail"][0]["msg"], refused.text
        assert refused.json()["detail"][0]["loc"] == ["body", "path"]
    with pg_backend.session() as session:
        names = set(session.scalars(select(Model.name).where(Model.team_id == world.team.id)))
    assert names == {"tiny", "ok"}
    with pg_backend.client(allowed_model_roots=[tmp_path]) as client:
        allowed = client.post(f"{API}/models", json={"name": "a", "path": str(outside)}, headers=member)
        assert allowed.status_code == 201
    listed = app_client.get(f"{API}/models", headers=world.headers("viewer")).json()
    assert {m["name"] for m in listed["data"]} == {"tiny", "ok", "a"}
