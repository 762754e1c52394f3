"""Chat datasets through the REST API: OpenAI `messages` rows uploaded as JSONL, Parquet and CSV; bad rows named by
row and column with nothing stored; the preview renders rows with a chosen model's chat template and counts prompt
tokens exactly as the runtime does."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.db.models import Dataset
from workers.datasets import read_jsonl

API = "/api/v1"


def chat_rows(n: int = 6) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "system", "content": "Answer with the number only."},
                          {"role": "user", "content": f"{i}+{i}="},
                          {"role": "assistant", "content": str(2 * i)}], "level": i % 3} for i in range(n)]


def parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def csv_bytes(rows: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    flat = [{**row, "messages": json.dumps(row["messages"])} for row in rows]
    pa_csv.write_csv(pa.Table.from_pylist(flat), buffer)
    return buffer.getvalue()


def upload(client: TestClient, headers: dict[str, str], name: str, filename: str, content: bytes) -> Any:
    return client.post(f"{API}/datasets", data={"name": name}, files={"file": (filename, content)}, headers=headers)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workers.models import build_tiny_model

    return build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("qwen") / "m")


def test_messages_datasets_in_three_formats_and_their_preview(app_client: TestClient, world: Any,
                                                             qwen_dir: Path) -> None:
    member = world.headers("member")
    rows = chat_rows()
    jsonl = "".join(json.dumps(r) + "\n" for r in rows).encode()
    stored = {}
    for name, filename, content in [("chat-jsonl", "chat.jsonl", jsonl), ("chat-parquet", "chat.parquet",
                                     parquet_bytes(rows)), ("chat-csv", "chat.csv", csv_bytes(rows))]:
        created = upload(app_client, member, name, filename, content)
        assert created.status_code == 201 and created.json()["row_count"] == 6, (name, created.text)
        stored[name] = created.json()["id"]
        with world.backend.session() as session:
            path = session.get(Dataset, created.json()["id"]).storage_path
        loaded = read_jsonl(path)  # what the runtime reads: normalised rows
        assert loaded[1]["prompt"][1] == {"role": "user", "content": "1+1="} and loaded[1]["answer"] == "2"
        assert loaded[1]["level"] == 1
    page = app_client.get(f"{API}/datasets/{stored['chat-parquet']}/rows", headers=member).json()
    assert page["data"][0]["messages"] == rows[0]["messages"] and page["count"] == 6

    shared = world.backend.settings.artifacts / "models" / f"qwen-{world.team.id}"
    shutil.copytree(qwen_dir, shared)
    assert app_client.post(f"{API}/models", json={"name": "qwen", "path": str(shared)},
                           headers=member).status_code == 201
    preview = app_client.get(f"{API}/datasets/{stored['chat-jsonl']}/preview",
                             params={"model": "qwen", "limit": 2}, headers=world.headers("viewer"))
    assert preview.status_code == 200, preview.text
    body = preview.json()
    assert body["chat_template"] is True and len(body["rows"]) == 2
    first = body["rows"][0]
    assert first["text"].startswith("<|im_start|>system\nAnswer with the number only.<|im_end|>\n<|im_start|>user")
    assert first["text"].endswith("<|im_start|>assistant\n") and first["meta"] == {"answer": "0", "level": 0}
    from transformers import AutoTokenizer

    from workers.core.chat import ChatEncoder

    encode = ChatEncoder(AutoTokenizer.from_pretrained(qwen_dir))
    expected = [len(encode.chat(r["prompt"])[1]) for r in read_jsonl_rows(jsonl)]
    assert [r["tokens"] for r in body["rows"]] == expected[:2]  # the runtime's count, token for token
    assert body["prompt_tokens"]["count"] == 6 and body["prompt_tokens"]["max"] == max(expected)
    assert sum(b["count"] for b in body["prompt_tokens"]["bins"]) == 6
    unknown = app_client.get(f"{API}/datasets/{stored['chat-jsonl']}/preview", params={"model": "nope"},
                             headers=member)
    assert unknown.status_code == 422 and "not registered" in unknown.json()["detail"][0]["msg"]


def read_jsonl_rows(content: bytes) -> list[dict[str, Any]]:
    from contract.prompt_rows import normalize_row

    return [normalize_row(json.loads(line)) for line in content.decode().splitlines() if line.strip()]


def test_bad_chat_rows_name_row_and_column_and_store_nothing(app_client: TestClient, world: Any) -> None:
    member = world.headers("member")
    rows = chat_rows(3)
    rows[1] = {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}
    jsonl = "".join(json.dumps(r) + "\n" for r in rows).encode()
    for filename, content, where in [("bad.jsonl", jsonl, "line 2"), ("bad.parquet", parquet_bytes(rows), "row 2"),
                                     ("bad.csv", csv_bytes(rows), "row 2")]:
        refused = upload(app_client, member, "bad", filename, content)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"][0]
        assert detail["msg"] == f"{where}: column `messages`: the prompt has no user turn", detail
        assert detail["loc"] == ["body", "file", where]
    bad_role = upload(app_client, member, "bad", "r.jsonl", b'{"messages": [{"role": "wizard", "content": "x"}]}\n')
    assert "line 1: column `messages`: message 0 has role 'wizard'" in bad_role.json()["detail"][0]["msg"]
    with world.backend.session() as session:
        assert session.scalar(select(func.count()).select_from(Dataset).where(Dataset.team_id == world.team.id)) == 0
    assert not (world.backend.settings.artifacts / "datasets" / str(world.team.id)).exists() or not any(
        (world.backend.settings.artifacts / "datasets" / str(world.team.id)).iterdir())


def test_generated_nul_bytes_are_stored_as_replacement_characters(app_client: TestClient, world: Any) -> None:
    """A byte-level BPE model can generate any byte, NUL included; PostgreSQL text refuses NUL."""
    from backend.db.models import JobSample
    from backend.services.job_data import record_samples

    job = world.submit(app_client)
    with world.backend.session() as session:
        record_samples(session=session, job_id=job["id"], samples=[{
            "iteration": 1, "sample_id": "0:0:0", "prompt": "p", "response": "ps\x00j", "reward": 0.0, "length": 3,
            "policy_version": 0, "instance_id": "gen-0", "reward_components": None, "reward_error": None,
            "truncated": True}])
    with world.backend.session() as session:
        stored = session.scalar(select(JobSample.response).where(JobSample.job_id == job["id"]))
    assert stored == "ps\ufffdj"
