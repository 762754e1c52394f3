"""No input makes the API answer 500: bounded ids, strict JSON (NaN, lone surrogates, huge ints, deep nesting),
odd bearer tokens and model paths, hostile dataset lines; plus the body cap, 405 + Allow, security headers and the
documented error statuses in the OpenAPI document."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

API = "/api/v1"
HUGE = "9" * 25  # above 2^63


def _json(client: TestClient, method: str, path: str, raw: bytes, headers: dict[str, str]) -> Any:
    return client.request(method, API + path, content=raw, headers={**headers, "content-type": "application/json"})


@pytest.mark.parametrize(
    "path",
    [
        f"/jobs/{HUGE}", f"/jobs/{HUGE}/events", f"/jobs/{HUGE}/stream", f"/datasets/{HUGE}",
        f"/datasets/{HUGE}/rows", f"/jobs?offset={HUGE}", f"/datasets?offset={HUGE}", "/jobs/1/events?after_id=-1",
        f"/jobs/1/samples?iteration={HUGE}", "/jobs/1/timeline?since=nan", "/jobs/1/timeline?since=inf", "/jobs/0",
    ],
)
def test_out_of_range_ids_and_offsets_are_422(app_client: TestClient, world: Any, path: str) -> None:
    response = app_client.get(API + path, headers=world.headers("viewer"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][0] in ("path", "query")


def test_huge_ids_in_bodies_and_deletes_are_422(app_client: TestClient, world: Any) -> None:
    admin = world.headers("admin")
    for method, path in [("delete", f"/keys/{HUGE}"), ("delete", f"/teams/current/members/{HUGE}")]:
        assert app_client.request(method, API + path, headers=admin).status_code == 422
    big = 2**63
    spec = {"model": "tiny", "dataset": {"id": big}}
    assert app_client.post(f"{API}/jobs", json=spec, headers=admin).status_code == 422
    assert app_client.post(f"{API}/auth/switch-team", json={"team_id": big}, headers=admin).status_code == 422
    login = {"email": "a@b.cd", "password": "x", "team_id": big}
    assert app_client.post(f"{API}/auth/login", json=login).status_code == 422


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/auth/login", b'{"email": "\\ud800@example.com", "password": "x"}'),
        ("/auth/register", b'{"email": "a@example.com", "password": "long-\\udfff-password", "team_name": "t"}'),
        ("/jobs", b'{"model": "tiny", "name": "\\ud83d", "dataset": {"builtin": "arithmetic"}}'),
        ("/jobs", b'{"model": "tiny", "dataset": {"builtin": "arithmetic"}, "algorithm": {"kl_coef": NaN}}'),
        ("/jobs", b'{"model": "tiny", "dataset": {"builtin": "arithmetic"}, "generation": {"top_p": Infinity}}'),
        ("/jobs", b'{"model": "tiny", "dataset": {"builtin": "arithmetic"}, "seed": ' + b"7" * 5000 + b"}"),
        ("/jobs", b'{"model": "tiny", "dataset": {"builtin": "arithmetic"}, "reward": {"params": '
         + b'{"a": ' * 100 + b"1" + b"}" * 100 + b"}}"),
        ("/jobs", b"[" * 100_000 + b"]" * 100_000),
        ("/models", b'{"name": "m", "path": "\\udc80"}'),
    ],
)
def test_hostile_json_is_422_with_a_serialisable_body(
    app_client: TestClient, world: Any, path: str, raw: bytes
) -> None:
    response = _json(app_client, "post", path, raw, world.headers("admin"))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail[0]["loc"][0] == "body" and detail[0]["msg"]
    if b"\\u" in raw:  # the offending string is named by its place in the document
        assert len(detail[0]["loc"]) > 1, detail


@pytest.mark.parametrize(
    ("extra", "loc"),
    [
        ({"seed": True}, ["body", "seed"]),
        ({"seed": 2**31}, ["body", "seed"]),
        ({"checkpoint": {"keep": True}}, ["body", "checkpoint", "keep"]),
        ({"checkpoint": {"keep": 10_001}}, ["body", "checkpoint", "keep"]),
        ({"autoscale": {"max_instances": 10**6}}, ["body", "autoscale", "max_instances"]),
        ({"generation": {"stop": ["x"] * 100}}, ["body", "generation", "stop"]),
        ({"generation": {"stop": ["x" * 10_000]}}, ["body", "generation", "stop"]),
        ({"training": {"iterations": True}}, ["body", "training", "iterations"]),
        ({"generation": {"engine": "vllm", "vllm": {"tensor_parallel_size": 0}}},
         ["body", "generation", "vllm", "tensor_parallel_size"]),
        ({"generation": {"engine": "vllm", "vllm": {"gpu_memory_utilization": 1.5}}},
         ["body", "generation", "vllm", "gpu_memory_utilization"]),
        ({"generation": {"engine": "vllm", "vllm": {"dtype": "int3"}}}, ["body", "generation", "vllm", "dtype"]),
        ({"generation": {"vllm": {"tensor_parallel_size": 2}}}, ["body", "generation"]),
        ({"training": {"devices": 2, "max_tokens_per_micro_batch": 4096}}, ["body"]),
        ({"generation": {"engine": "vllm", "max_tokens": 64, "vllm": {"max_model_len": 64}}}, ["body", "generation"]),
        ({"reward": {"params": {"blob": "x" * 100_000}}}, ["body", "reward", "params"]),
    ],
)
def test_spec_bounds_are_422_naming_the_field(
    app_client: TestClient, world: Any, job_spec: Any, extra: dict[str, Any], loc: list[str]
) -> None:
    response = app_client.post(f"{API}/jobs", json=job_spec(**extra), headers=world.headers("member"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_nan_in_a_bounded_field_answers_a_422_that_serialises(app_client: TestClient, world: Any) -> None:
    # NaN reached through the query string (not JSON) still gets a JSON-serialisable 422.
    response = app_client.get(f"{API}/jobs/1/timeline?since=NaN", headers=world.headers("viewer"))
    assert response.status_code == 422 and response.json()["detail"][0]["input"] == "NaN"


@pytest.mark.parametrize(
    "token", [b"Bearer sess_\xe9\xe9.x", b"Bearer srl_\xff_\xfe", b"Bearer \xc3\xa9", b"Bearer " + b"s" * 10_000]
)
def test_odd_bearer_tokens_are_401(app_client: TestClient, token: bytes) -> None:
    response = app_client.get(f"{API}/auth/me", headers={"Authorization": token})  # type: ignore[dict-item]
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("path", ["~nosuchuser/x", "a" * 300, "x/" * 400, "models/\x00", "C:\\\\x", "models/../../.."])
def test_odd_model_paths_are_422(app_client: TestClient, world: Any, path: str) -> None:
    response = app_client.post(f"{API}/models", json={"name": "m", "path": path}, headers=world.headers("member"))
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "path"], response.text


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b'{"prompt": "a"}\n{"prompt": "b", "n": ' + b"1" * 5000 + b"}\n", 2),
        (b'{"prompt": "a"}\n' + b'{"prompt": "a", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", 2),
        (b'{"prompt": "a"}\x0c{"prompt": "b"}\n', 1),
        ('{"prompt": "a"}\u2028{"prompt": "b"}\n'.encode(), 1),
        (b'{"prompt": "a"}\n{"prompt": "b"}\r{"prompt": "c"}\n', 2),
        (b'{"prompt": "a"}\n{"prompt": "\\ud800"}\n', 2),
        (b'{"prompt": "a", "w": NaN}\n', 1),
    ],
)
def test_hostile_dataset_lines_are_422_naming_the_line(
    app_client: TestClient, world: Any, content: bytes, line: int
) -> None:
    files = {"file": ("d.jsonl", io.BytesIO(content))}
    response = app_client.post(f"{API}/datasets", data={"name": "d"}, files=files, headers=world.headers("member"))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "file", f"line {line}"]


def test_separators_inside_strings_are_data_and_read_back(app_client: TestClient, world: Any) -> None:
    content = '{"prompt": "a\u2028b\\fc"}\r\n{"prompt": "d"}\n'.encode()  # raw U+2028, escaped \\f
    files = {"file": ("d.jsonl", io.BytesIO(content))}
    created = app_client.post(f"{API}/datasets", data={"name": "d"}, files=files, headers=world.headers("member"))
    assert created.status_code == 201 and created.json()["row_count"] == 2, created.text
    rows = app_client.get(f"{API}/datasets/{created.json()['id']}/rows", headers=world.headers("viewer"))
    assert rows.status_code == 200 and [r["prompt"] for r in rows.json()["data"]] == ["a\u2028b\x0cc", "d"]


def test_request_bodies_are_capped_with_413(pg_backend: Any, world: Any, job_spec: Any) -> None:
    with pg_backend.client(max_request_bytes=64 * 1024, max_upload_bytes=100_000) as client:
        member = world.headers("member")
        big = job_spec(reward={"type": "python", "code": "def reward(p, r, m):\n    return 0.0\n#" + "x" * 70_000})
        response = client.post(f"{API}/jobs", json=big, headers=member)
        assert response.status_code == 413 and "limit" in response.json()["detail"]
        chunks = (b"{" for _ in range(1))  # a body without Content-Length is counted as it streams
        streamed = client.post(f"{API}/jobs", content=(c * 70_000 for c in chunks),
                               headers={**member, "content-type": "application/json"})
        assert streamed.status_code == 413
        files = {"file": ("d.jsonl", io.BytesIO(b'{"prompt": "a"}\n' * 20_000))}
        upload = client.post(f"{API}/datasets", data={"name": "d"}, files=files, headers=member)
        assert upload.status_code == 413
        listed = client.get(f"{API}/jobs", headers=member)
        assert listed.status_code == 200 and listed.json()["count"] == 0


def test_405_names_every_allowed_method(app_client: TestClient, world: Any) -> None:
    for method, path, allowed in [
        ("delete", "/jobs", "GET, HEAD, POST"),
        ("put", "/jobs/1", "GET, HEAD, PATCH"),
        ("get", "/auth/login", "POST"),
        ("post", "/teams/current/members/1", "DELETE, PATCH"),
    ]:
        response = app_client.request(method, API + path, headers=world.headers("admin"))
        assert response.status_code == 405, (method, path, response.status_code)
        assert response.headers["allow"] == allowed, (method, path)


def test_security_headers_on_api_answers_and_errors(app_client: TestClient) -> None:
    for response in (app_client.get(f"{API}/health"), app_client.get(f"{API}/jobs"), app_client.get("/openapi.json")):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"
        csp = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "'unsafe-eval'" not in csp


def test_security_headers_on_the_dashboard(pg_backend: Any, tmp_path: Any) -> None:
    from backend.api.static import install_frontend
    from backend.main import create_app

    (tmp_path / "index.html").write_text("<div id=root></div>")
    app = create_app(pg_backend.settings)
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", "") != "/{path:path}"]
    assert install_frontend(app, dist=tmp_path)
    with TestClient(app) as client:
        for path in ("/", "/jobs/42"):
            page = client.get(path)
            assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
            assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
        assert client.get("/api/v1/auth/login").status_code == 405  # an API path without GET, not the SPA
        assert client.get("/api/v1/auth/login").headers["allow"] == "POST"


def test_openapi_documents_error_statuses_with_the_error_schema(app_client: TestClient) -> None:
    document = app_client.get("/openapi.json").json()
    assert "ErrorBody" in document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"413", "422"} <= set(responses), (method, path)
            public = path in (f"{API}/health", f"{API}/ready", f"{API}/auth/login", f"{API}/auth/register")
            if not public:
                assert "401" in responses, (method, path)
            if not public and not path.startswith(f"{API}/auth/"):
                assert {"403", "404"} <= set(responses), (method, path)
            for status, answer in responses.items():
                if status.startswith("4"):
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
    assert "429" in document["paths"][f"{API}/auth/login"]["post"]["responses"]
    assert "409" in document["paths"][f"{API}/jobs/{{job_id}}/cancel"]["post"]["responses"]
    assert json.dumps(document)  # serialisable as a whole


def test_regressions_found_by_schemathesis(app_client: TestClient, world: Any) -> None:
    """Each of these answered 500, or was accepted although the schema forbids it, before the fix."""
    admin = world.headers("admin")
    for method, path, body in [
        ("post", "/auth/login", {"email": "00\u0000", "password": "x"}),  # NUL: Postgres cannot store it
        ("post", "/keys", {"name": "\u0000"}),
        ("patch", "/teams/current/quotas", {"max_generation_instances": False}),  # bool is not a number
        ("post", "/plans", {"lengths": {"pareto_min": True}}),
        ("post", "/plans", {"algorithm": "ppo", "lengths": {}, "mfu": 5e-324}),  # figures overflowed to inf
    ]:
        response = app_client.request(method, API + path, json=body, headers=admin)
        assert response.status_code == 422, (path, body, response.status_code, response.text)
    for query in ("name=%00", "offset=1&offset=2", "ofset=5", "%ED%A0%80=1"):
        response = app_client.get(f"{API}/jobs?{query}", headers=admin)
        assert response.status_code == 422 and response.json()["detail"][0]["loc"][0] == "query", (query, response.text)
    files = {"file": ("d.jsonl", io.BytesIO(b'{"prompt": "a"}\n'))}
    response = app_client.post(f"{API}/datasets", data={"name": "a\x00b"}, files=files, headers=admin)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "name"]
