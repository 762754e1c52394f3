"""Issue 36, findings 6 and 8: bad and oversized inputs to the upload parsers and spec validators are clear 4xx
answers naming the problem (never a 500), leave no file or row behind, and cost little: corrupt and colliding
archives, model files with odd types or absurd nesting, deeply nested code and formulas, dataset files that inflate
to millions of rows, chat templates that would allocate a gigabyte, zstd bodies that inflate past the request cap."""

from __future__ import annotations

import io
import json
import random
import struct
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from minimal_model import write_minimal_model
from sqlalchemy import select

from backend.db.models import Dataset, Model, Team, User
from backend.services.auth import new_api_key

API = "/api/v1"


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def tar_gz(members: list[tuple[str, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def model_files(tmp_path: Path, mutate: Callable[[Path], None] | None = None) -> list[tuple[str, bytes | None]]:
    """A minimal valid model directory (tests/minimal_model.py), changed by `mutate`, as archive members."""
    root = write_minimal_model(tmp_path / "m")
    if mutate is not None:
        mutate(root)
    return [(f"model/{p.name}", p.read_bytes()) for p in sorted(root.iterdir())]


def config(**changes: Any) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        raw = json.loads((root / "config.json").read_text())
        raw.update(changes)
        (root / "config.json").write_text(json.dumps(raw))
    return mutate


def raw_file(name: str, content: bytes) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / name).write_bytes(content)
    return mutate


def safetensors(header: str) -> Callable[[Path], None]:
    raw = header.encode()
    return raw_file("model.safetensors", struct.pack("<Q", len(raw)) + raw)


def zip_declared_smaller(tmp_path: Path) -> bytes:
    """A zip whose config.json says 10 bytes (local header and central directory) but holds 1000."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in model_files(tmp_path):
            archive.writestr(name, data or b"")
        archive.writestr("model/notes.txt", b"n" * 1000)
    raw = bytearray(buffer.getvalue())
    size = struct.pack("<I", 1000)
    at = raw.find(size)
    while at >= 0:
        raw[at:at + 4] = struct.pack("<I", 10)
        at = raw.find(size, at + 4)
    return bytes(raw)


def zip_collision() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model/a", b"1")
        archive.writestr("model/a/b", b"2")
    return buffer.getvalue()


def zip_flagged(tmp_path: Path, *, method: int | None = None, encrypted: bool = False) -> bytes:
    """A valid model zip whose members claim an unsupported compression method, or encryption."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in model_files(tmp_path):
            archive.writestr(name, data or b"")
    raw = bytearray(buffer.getvalue())
    for signature, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local headers, central directory
        at = raw.find(signature)
        while at >= 0:
            if method is not None:
                raw[at + flags_at + 2:at + flags_at + 4] = struct.pack("<H", method)
            if encrypted:
                raw[at + flags_at:at + flags_at + 2] = struct.pack("<H", 1)
            at = raw.find(signature, at + 4)
    return bytes(raw)


DEEP_JSON = "[" * 100_000 + "]" * 100_000
ARCHIVES: list[tuple[str, Callable[[Path], bytes], str]] = [
    ("zip-declared-smaller", zip_declared_smaller, "corrupt, truncated"),
    ("tar-truncated", lambda t: tar_gz([*model_files(t), ("model/pad", random.Random(0).randbytes(100_000))])[:50_000],
     "corrupt, truncated"),
    ("tar-file-then-dir", lambda t: tar_gz([*model_files(t), ("model/x", b"1"), ("model/x/y", b"2")]), "collides"),
    ("tar-dir-then-file", lambda t: tar_gz([*model_files(t), ("model/x/y", b"2"), ("model/x", b"1")]), "collides"),
    ("tar-duplicate", lambda t: tar_gz([*model_files(t), ("model/x", b"1"), ("model/x", b"2")]), "collides"),
    ("zip-file-then-dir", lambda t: zip_collision(), "collides"),
    ("zip-method-99", lambda t: zip_flagged(t, method=99), "corrupt, truncated"),
    ("zip-encrypted", lambda t: zip_flagged(t, encrypted=True), "corrupt, truncated"),
    ("vocab-string", lambda t: tar_gz(model_files(t, config(vocab_size="abc"))), "`vocab_size` must be an integer"),
    ("vocab-list", lambda t: tar_gz(model_files(t, config(vocab_size=[]))), "`vocab_size` must be an integer"),
    ("vocab-1e400", lambda t: tar_gz(model_files(t, raw_file("config.json", json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).replace("}", ', "vocab_size": 1e400}')
        .encode()))), "`vocab_size` must be an integer"),
    ("deep-config", lambda t: tar_gz(model_files(t, raw_file("config.json", DEEP_JSON.encode()))),
     "nested too deeply"),
    ("deep-safetensors", lambda t: tar_gz(model_files(t, safetensors('{"a":' * 100_000 + "1" + "}" * 100_000))),
     "nested too deeply"),
    ("dict-shape", lambda t: tar_gz(model_files(t, safetensors(json.dumps(
        {"w": {"dtype": "F32", "shape": {"a": 1}, "data_offsets": [0, 0]}})))), "not a list of sizes"),
    ("int-shape", lambda t: tar_gz(model_files(t, safetensors(json.dumps(
        {"w": {"dtype": "F32", "shape": 7, "data_offsets": [0, 0]}})))), "not a list of sizes"),
    ("negative-dim", lambda t: tar_gz(model_files(t, safetensors(json.dumps(
        {"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 0]}})))), "shape entry must be an integer"),
]


@pytest.mark.parametrize(("name", "build", "reason"), ARCHIVES, ids=[case[0] for case in ARCHIVES])
def test_bad_model_archives_are_422_and_leave_nothing(app_client: TestClient, world: Any, tmp_path: Path,
                                                      name: str, build: Callable[[Path], bytes], reason: str) -> None:
    artifacts = world.backend.settings.artifacts
    before = set(files_under(artifacts))
    answer = app_client.post(f"{API}/models/upload", data={"name": name}, headers=world.headers("member"),
                             files={"file": (f"{name}.tar.gz", build(tmp_path))})
    assert answer.status_code == 422, answer.text
    assert reason in answer.json()["detail"][0]["msg"], answer.text
    assert set(files_under(artifacts)) == before
    with world.backend.session() as session:
        assert session.scalar(select(Model.id).where(Model.team_id == world.team.id, Model.name == name)) is None


def test_an_odd_model_card_is_described_not_a_500(app_client: TestClient, world: Any, tmp_path: Path) -> None:
    """Fields the card only describes (dtype, named chat templates) are dropped when they have the wrong type."""
    def odd(root: Path) -> None:
        config(torch_dtype={"not": "a dtype"})(root)
        (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": ["x"], "template": 1}]}))

    answer = app_client.post(f"{API}/models/upload", data={"name": "odd"}, headers=world.headers("member"),
                             files={"file": ("odd.tar.gz", tar_gz(model_files(tmp_path, odd)))})
    assert answer.status_code == 201, answer.text
    card = answer.json()["card"]
    assert card["dtype"] == "float32" and card["chat_template"] is False and card["vocab_size"] == 4


def test_deep_code_and_formulas_are_422(app_client: TestClient, world: Any) -> None:
    code = "def reset(row):\n    return []\n\ndef step(messages, row):\n    return " + "-" * 50_000 + "1\n"
    job = app_client.post(f"{API}/jobs", headers=world.headers("member"), json={
        "name": "deep", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
        "environment": {"type": "python", "code": code}})
    assert job.status_code == 422, job.text
    assert "nested too deeply" in job.text
    multi = {"type": "multi", "params": {
        "graders": {"a": {"type": "string_check", "input": "{{ sample.output_text }}", "reference": "x",
                          "operation": "eq"}},
        "calculate_output": "-" * 999 + "a"}}
    graded = app_client.post(f"{API}/graders/run", headers=world.headers("viewer"),
                             json={"grader": multi, "sample": {"output_text": "x"}, "item": {}})
    assert graded.status_code == 422 and "nested more than" in graded.json()["detail"][0]["msg"], graded.text
    submitted = app_client.post(f"{API}/jobs", headers=world.headers("member"), json={
        "name": "deep-formula", "model": "tiny", "dataset": {"builtin": "arithmetic", "num_prompts": 8},
        "reward": multi})
    assert submitted.status_code == 422 and "calculate_output" in submitted.text, submitted.text


def parquet_rows(count: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table({"prompt": pa.array(["2+2="] * count).dictionary_encode()}), buffer,
                   compression="zstd")
    return buffer.getvalue()


DATASETS: list[tuple[str, Callable[[], bytes], int, str]] = [
    ("rows.parquet", lambda: parquet_rows(2_000_000), 413, "declares 2000000 rows"),
    ("rows.jsonl", lambda: b'{"prompt": "2+2="}\n' * 300_000, 413, "at most 200000 rows"),
    ("rows.csv", lambda: b"prompt\n" + b"2+2=\n" * 300_000, 413, "at most 200000 rows"),
    ("deep.csv", lambda: b'messages\n"' + b"[" * 100_000 + b"]" * 100_000 + b'"\n', 422, "nesting deeper"),
]


@pytest.mark.parametrize(("filename", "build", "status", "reason"), DATASETS, ids=[case[0] for case in DATASETS])
def test_dataset_uploads_are_bounded_before_they_are_materialised(
        app_client: TestClient, world: Any, filename: str, build: Callable[[], bytes], status: int,
        reason: str) -> None:
    artifacts = world.backend.settings.artifacts
    before = set(files_under(artifacts))
    content = build()
    assert len(content) < 10 * 1024 * 1024  # well within the upload cap: the limit is on what it inflates to
    answer = app_client.post(f"{API}/datasets", data={"name": filename}, headers=world.headers("member"),
                             files={"file": (filename, content)})
    assert answer.status_code == status, answer.text[:500]
    detail = answer.json()["detail"][0]
    assert detail["loc"][:2] == ["body", "file"] and reason in detail["msg"], detail
    assert set(files_under(artifacts)) == before
    with world.backend.session() as session:
        assert session.scalar(select(Dataset.id).where(Dataset.name == filename)) is None


def test_a_chat_template_that_would_allocate_a_gigabyte_is_refused(app_client: TestClient, world: Any,
                                                                  register_model: Any) -> None:
    import resource

    model = register_model(world.backend, world.team, "hostile-template")
    (Path(model.path) / "chat_template.jinja").write_text("{{ ('x' * 1000000000)[:1] }}{{ messages[0].content }}")
    rows = b'{"messages": [{"role": "user", "content": "hi"}]}\n'
    dataset = app_client.post(f"{API}/datasets", data={"name": "chat"}, headers=world.headers("member"),
                              files={"file": ("chat.jsonl", rows)}).json()
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    answer = app_client.get(f"{API}/datasets/{dataset['id']}/preview", params={"model": "hostile-template"},
                            headers=world.headers("viewer"))
    assert answer.status_code == 422, answer.text
    assert "MB of memory" in answer.json()["detail"][0]["msg"]
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 256 * 1024, f"the API process grew by {grown_kib} KiB"  # not the gigabyte


def test_a_zstd_bomb_is_413_within_the_request_cap(pg_backend: Any, world: Any, live_server: str) -> None:
    import zstandard

    with pg_backend.session() as session:
        key = new_api_key(session=session, team=session.get(Team, world.team.id),
                          creator=session.get(User, world.users["member"].id), name="tinker",
                          scopes=["read", "write"])[1]
    bomb = zstandard.ZstdCompressor(level=19).compress(bytes(200_000_000))
    assert len(bomb) < 10_000
    answer = httpx.post(f"{live_server}/tinker/api/v1/forward_backward", content=bomb, timeout=60, headers={
        "X-API-Key": key, "content-encoding": "zstd", "content-type": "application/x-protobuf"})
    assert answer.status_code == 413, answer.text
    assert "decompresses to more than" in answer.json()["detail"]
    garbage = httpx.post(f"{live_server}/tinker/api/v1/forward_backward", content=b"not zstd", timeout=60, headers={
        "X-API-Key": key, "content-encoding": "zstd", "content-type": "application/x-protobuf"})
    assert garbage.status_code == 400 and "cannot be decompressed" in garbage.json()["detail"]
    assert httpx.get(f"{live_server}{API}/health", timeout=10).status_code == 200
