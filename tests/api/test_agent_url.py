"""`agent.url` (a remote agent service, workers/runtime/remote_agent.py): at submit a URL that is not http(s) or that
the egress policy refuses is a 422 naming agent.url, nothing stored; the job's signing secret is its members' (another
team's job: 404). `RemoteAgent` against a real HTTP server: the POST is signed with that secret, the answered reward
is taken, a non-number reward or an HTTP error fails the episode naming it, a dead address is retried
`agent.retries` times before the episode fails, and a connection dropped mid-episode marks the episode lost (the
gateway retries it from a clean start)."""

from __future__ import annotations

import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from waiting import free_port

from backend.db.models import Job
from contract.agent import AgentSpec
from contract.settings import Settings, get_settings
from contract.signing import SIGNATURE_HEADER, agent_secret, sign
from workers.runtime.remote_agent import AgentDone, AgentDropped, AgentFailed, AgentRuns, AgentTask, RemoteAgent

API = "/api/v1"


@pytest.fixture
def egress_allow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Sets STREAMRL_EGRESS_ALLOW for the submit check (which reads the process's settings)."""
    def allow(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("STREAMRL_EGRESS_ALLOW", raising=False)
        else:
            monkeypatch.setenv("STREAMRL_EGRESS_ALLOW", value)
        get_settings.cache_clear()

    yield allow
    monkeypatch.undo()
    get_settings.cache_clear()


def _jobs(backend: Any, team: Any) -> int:
    with backend.session() as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(Job.team_id == team.id)) or 0)


def test_bad_agent_urls_are_422s_naming_agent_url(app_client: TestClient, world: Any, job_spec: Any,
                                                  egress_allow: Any) -> None:
    egress_allow(None)
    headers = world.headers("member")
    before = _jobs(world.backend, world.team)
    for url, words in [("ftp://agents.example.com", "http(s) URL"), ("http://127.0.0.1:9", "loopback"),
                       ("http://10.1.2.3/agent", "private-network"), ("http://169.254.169.254", "link-local")]:
        spec = job_spec(environment={"type": "gateway"}, agent={"url": url})
        response = app_client.post(f"{API}/jobs", json=spec, headers=headers)
        assert response.status_code == 422, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"][:3] == ["body", "agent", "url"] and words in detail["msg"], detail
    assert _jobs(world.backend, world.team) == before  # nothing half-written


def test_the_signing_secret_is_the_jobs_members(app_client: TestClient, world: Any, other_world: Any, job_spec: Any,
                                                egress_allow: Any) -> None:
    egress_allow("127.0.0.1")
    spec = job_spec(environment={"type": "gateway"}, agent={"url": "http://127.0.0.1:9/agent", "concurrency": 3})
    created = app_client.post(f"{API}/jobs", json=spec, headers=world.headers("member"))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    answer = app_client.get(f"{API}/jobs/{job_id}/rollouts/agent", headers=world.headers("member"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["signature_header"] == SIGNATURE_HEADER
    assert answer.json()["signing_secret"] == agent_secret(world.backend.settings.secret_key, job_id)
    other = app_client.get(f"{API}/jobs/{job_id}/rollouts/agent", headers=other_world.headers("admin"))
    assert other.status_code == 404, other.text


@pytest.fixture
def agent_server() -> Iterator[Any]:
    """Answers POST /rollout with the JSON in `server.answers` (status, body), recording bodies and signatures."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            server.seen.append((self.path, body, self.headers.get(SIGNATURE_HEADER)))
            status, payload = server.answers.pop(0)
            if status is None:  # the agent's process dies mid-episode: the connection closes without an answer
                return
            data = payload.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.seen, server.answers = [], []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _agent(url: str, **fields: Any) -> RemoteAgent:
    settings = Settings(secret_key="s" * 40, egress_allow="127.0.0.1")
    return RemoteAgent(AgentSpec(url=url, timeout_s=10, **fields), settings, job_id=7)


TASK = AgentTask("ep-1", {"prompt": "1+1=", "answer": "2"}, "http://api/rollouts/ep-1/v1", "srl_ep_x")


def test_a_remote_agent_is_posted_signed_and_its_answer_checked(agent_server: Any) -> None:
    agent = _agent(f"http://127.0.0.1:{agent_server.server_address[1]}")
    agent_server.answers = [(200, '{"reward": 0.5}'), (200, ""), (200, '{"reward": "high"}'), (500, "{}"),
                            (200, "not json")]
    assert agent(TASK) == 0.5
    path, body, signature = agent_server.seen[0]
    assert path == "/rollout" and json.loads(body) == {"task": TASK.task, "base_url": TASK.base_url,
                                                        "api_key": TASK.api_key, "episode": "ep-1"}
    assert hmac.compare_digest(signature, sign(agent_secret("s" * 40, 7), body))
    assert agent(TASK) is None  # no reward in the answer: the reward endpoint's, or the grader's
    with pytest.raises(AgentFailed, match="reward must be a finite number"):
        agent(TASK)
    with pytest.raises(AgentFailed, match="HTTP 500"):
        agent(TASK)
    with pytest.raises(AgentFailed, match="not JSON"):
        agent(TASK)
    agent.close()


def test_a_dead_agent_is_retried_then_fails_the_episode() -> None:
    agent = _agent(f"http://127.0.0.1:{free_port()}", retries=2)  # nothing listens there
    with pytest.raises(AgentFailed, match="unreachable after 3 attempts"):
        agent(TASK)
    agent.close()


def test_a_connection_dropped_mid_episode_is_a_lost_episode(agent_server: Any) -> None:
    """The agent took the episode and closed the connection without answering: not its answer, so the episode is
    `lost` (workers/runtime/gateway.py retries it as a new episode), not failed; the next episode is answered."""
    agent = _agent(f"http://127.0.0.1:{agent_server.server_address[1]}")
    agent_server.answers = [(None, ""), (200, '{"reward": 1}')]
    with pytest.raises(AgentDropped, match="dropped the connection before answering"):
        agent(TASK)
    runs = AgentRuns(agent, 1, 10, "http://api")
    try:
        runs.start(TASK)
        assert _one_done(runs) == AgentDone("ep-1", 1.0, None)
        agent_server.answers = [(None, "")]
        runs.start(TASK)
        done = _one_done(runs)
        assert done.lost and "dropped the connection" in (done.error or ""), done
    finally:
        runs.close()


def _one_done(runs: AgentRuns) -> AgentDone:
    deadline = time.monotonic() + 30
    while not (done := runs.finished()):
        assert time.monotonic() < deadline, "the episode did not finish"
        time.sleep(0.01)
    assert len(done) == 1, done
    return done[0]
