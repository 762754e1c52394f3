"""The SDK client's error handling and SSE parsing (answers served by httpx.MockTransport, no server)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import httpx
import pytest

from backend.client import APIError, ConnectionFailed, StreamRLClient, parse_sse


def _client(handler: Callable[[httpx.Request], httpx.Response], token: str | None = "tok") -> StreamRLClient:
    return StreamRLClient("http://api.test", token, transport=httpx.MockTransport(handler))


def test_not_found_names_status_detail_and_route() -> None:
    api = _client(lambda req: httpx.Response(404, json={"detail": "job 5 not found"}))
    with pytest.raises(APIError) as info:
        api.get_job(5)
    assert info.value.status == 404
    assert info.value.detail == "job 5 not found"
    assert str(info.value) == "404 job 5 not found (GET /api/v1/jobs/5)"


def test_validation_errors_name_the_field() -> None:
    detail = [{"loc": ["body", "generation", "batch_size"], "msg": "Input should be greater than or equal to 1"},
              {"loc": ["body", "dataset"], "msg": "Field required"}]
    api = _client(lambda req: httpx.Response(422, json={"detail": detail}))
    with pytest.raises(APIError) as info:
        api.submit_job({"model": "m"})
    assert "generation.batch_size: Input should be greater than or equal to 1" in info.value.message
    assert "dataset: Field required" in info.value.message


def test_conflict_keeps_the_whole_body() -> None:
    api = _client(lambda req: httpx.Response(409, json={"detail": "cannot pause a queued job",
                                                         "current_status": "queued"}))
    with pytest.raises(APIError) as info:
        api.pause_job(3)
    assert info.value.status == 409
    assert info.value.body["current_status"] == "queued"


def test_non_json_error_body() -> None:
    api = _client(lambda req: httpx.Response(502, text="Bad Gateway from proxy"))
    with pytest.raises(APIError, match="502 Bad Gateway from proxy"):
        api.list_jobs()


def test_token_sent_as_bearer_and_login_replaces_it() -> None:
    seen: list[str | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers.get("authorization"))
        if req.url.path == "/api/v1/auth/login":
            assert json.loads(req.content) == {"email": "a@b.c", "password": "pw"}
            return httpx.Response(200, json={"token": "session-1", "user": {}, "team": {}, "teams": []})
        return httpx.Response(200, json={"data": [], "count": 0})

    api = _client(handler, token=None)
    api.login("a@b.c", "pw")
    api.list_jobs(status="running", limit=5)
    assert seen == [None, "Bearer session-1"]


def test_query_params_drop_none_and_204_is_none() -> None:
    urls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        urls.append(str(req.url))
        return httpx.Response(204) if req.method == "DELETE" else httpx.Response(200, json={"data": [], "count": 0})

    api = _client(handler)
    api.list_jobs(status="queued")
    api.revoke_key(4)  # 204: no body, no error
    assert urls == ["http://api.test/api/v1/jobs?status=queued", "http://api.test/api/v1/keys/4"]


def test_scale_needs_something_to_change() -> None:
    api = _client(lambda req: httpx.Response(200, json={}))
    with pytest.raises(ValueError, match="target_instances"):
        api.scale_job(1)


def test_unreachable_server_is_connection_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket closes
    api = StreamRLClient(f"http://127.0.0.1:{port}", "tok", timeout=2)
    with pytest.raises(ConnectionFailed, match=f"cannot reach the StreamRL API at http://127.0.0.1:{port}"):
        api.health()


def test_stream_error_status_raises_api_error() -> None:
    api = _client(lambda req: httpx.Response(404, json={"detail": "job 9 not found"}))
    with pytest.raises(APIError, match="404 job 9 not found"):
        next(iter(api.stream_job(9)))


def test_stream_yields_parsed_events() -> None:
    body = ('event: status\ndata: {"status": "running"}\n\n: keep-alive\n\n'
            'event: event\nid: 4\ndata: {"id": 4, "kind": "info",\ndata:  "message": "hi"}\n\n')
    api = _client(lambda req: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"}))
    events = list(api.stream_job(1))
    assert [(e.event, e.id) for e in events] == [("status", None), ("event", "4")]
    assert events[0].data == {"status": "running"}
    assert events[1].data == {"id": 4, "kind": "info", "message": "hi"}


def test_parse_sse_plain_text_and_trailing_event() -> None:
    events = list(parse_sse(["data: not json", "", "event: metrics", "data: {\"iteration\": 2}"]))
    assert events[0].event == "message" and events[0].data == "not json"
    assert events[1].event == "metrics" and events[1].data == {"iteration": 2}


def test_wait_for_status_polls_until_final_or_times_out() -> None:
    statuses = iter(["queued", "running", "succeeded"])
    api = _client(lambda req: httpx.Response(200, json={"id": 1, "status": next(statuses)}))
    assert api.wait_for_status(1, poll_s=0.0)["status"] == "succeeded"
    stuck = _client(lambda req: httpx.Response(200, json={"id": 2, "status": "queued"}))
    with pytest.raises(TimeoutError, match="job 2 still queued after 0s"):
        stuck.wait_for_status(2, ["running"], timeout_s=0.0)
