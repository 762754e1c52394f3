"""Model versions and deletion (issue 39): a name registered or uploaded again becomes its next version, listed with
the others; a job keeps the version it was submitted with; a version is deleted only while no unfinished job uses
it (409 naming the jobs), its uploaded files with it; another team's model answers 404, a viewer 403."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from minimal_model import write_minimal_model
from sqlalchemy import select

from backend.db.enums import JobStatus
from backend.db.models import Job
from backend.services.jobs import transition_job
from backend.services.models import job_model

API = "/api/v1"


def _archive(source: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(source, arcname="model")
    return buffer.getvalue()


def _versions(client: TestClient, headers: dict[str, str], name: str) -> list[int]:
    listed = client.get(f"{API}/models", headers=headers).json()["data"]
    return [m["version"] for m in listed if m["name"] == name]


def test_versions_pinning_and_delete(app_client: TestClient, world: Any, other_world: Any, pg_backend: Any) -> None:
    member, viewer = world.headers("member"), world.headers("viewer")
    first = write_minimal_model(pg_backend.settings.artifacts / "models" / "versioned-1")
    v1 = app_client.post(f"{API}/models", json={"name": "qwen", "path": str(first)}, headers=member)
    v2 = app_client.post(f"{API}/models", json={"name": "qwen", "path": str(first)}, headers=member)
    assert (v1.status_code, v2.status_code) == (201, 201), v2.text
    assert (v1.json()["version"], v2.json()["version"]) == (1, 2)
    v3 = app_client.post(f"{API}/models/upload", data={"name": "qwen"},
                         files={"file": ("m.tar.gz", _archive(write_minimal_model(pg_backend.settings.artifacts
                                                                                   / "upload-src")))},
                         headers=member).json()
    assert v3["version"] == 3 and _versions(app_client, viewer, "qwen") == [3, 2, 1]  # newest first

    job = world.submit(app_client, model="qwen")  # the name means its newest version, kept for the job's life
    newer = app_client.post(f"{API}/models", json={"name": "qwen", "path": str(first)}, headers=member).json()
    assert newer["version"] == 4
    with pg_backend.session() as session:
        row = session.get(Job, job["id"])
        pinned = job_model(session, row) if row is not None else None
        assert row is not None and row.model_id == v3["id"] and pinned is not None and pinned.path == v3["path"]

    refused = app_client.delete(f"{API}/models/{v3['id']}", headers=member)
    assert refused.status_code == 409, refused.text
    assert f"#{job['id']} (queued)" in refused.json()["detail"] and refused.json()["job_ids"] == [job["id"]]
    assert app_client.delete(f"{API}/models/{v1.json()['id']}", headers=viewer).status_code == 403
    assert app_client.delete(f"{API}/models/{v1.json()['id']}", headers=other_world.headers("admin")).status_code == 404
    assert app_client.delete(f"{API}/models/{v1.json()['id']}", headers=member).status_code == 204
    assert _versions(app_client, viewer, "qwen") == [4, 3, 2] and first.is_dir()  # a server directory stays

    with pg_backend.session() as session:
        row = session.scalar(select(Job).where(Job.id == job["id"]))
        assert row is not None
        transition_job(session=session, job=row, to=JobStatus.cancelled)
    assert app_client.delete(f"{API}/models/{v3['id']}", headers=member).status_code == 204
    assert not Path(v3["path"]).exists()  # the uploaded copy goes with its version
    assert app_client.get(f"{API}/models/{v3['id']}", headers=viewer).status_code == 404
    assert _versions(app_client, viewer, "qwen") == [4, 2]
    with pg_backend.session() as session:
        ended = session.get(Job, job["id"])
        assert ended is not None and ended.model_id is None


def test_deleting_the_newest_version_a_queued_job_loads_by_name_is_refused(
    app_client: TestClient, world: Any, pg_backend: Any
) -> None:
    """A spec's other model names (tokenizer, teacher, graders) resolve at run time to the newest version."""
    member = world.headers("member")
    path = write_minimal_model(pg_backend.settings.artifacts / "models" / "tokenizer-source")
    old, new = (app_client.post(f"{API}/models", json={"name": "tok", "path": str(path)}, headers=member).json()
                for _ in range(2))
    job = world.submit(app_client, tokenizer="tok")
    refused = app_client.delete(f"{API}/models/{new['id']}", headers=member)
    assert refused.status_code == 409 and refused.json()["job_ids"] == [job["id"]], refused.text
    assert app_client.delete(f"{API}/models/{old['id']}", headers=member).status_code == 204  # not what it loads
