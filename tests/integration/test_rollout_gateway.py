"""The rollout gateway on the real platform (Celery workers, Postgres, Redis, a live uvicorn API): an agent written
as a plain `openai` client loop (only `base_url` and `api_key` set) claims the episodes of an `environment.type:
gateway` job and drives each one over two chat calls (tools given; a tool call answered with a tool message, else a
follow-up user message), then posts its reward. The job trains to `succeeded`, and for every stored episode:
the trained tokens are exactly the tokens the client was sent (`token_ids`), the loss mask covers completions only,
an episode's two calls are one sequence (the second prompt holds the first call's sampled ids), and re-rendering an
opening call's messages reproduces its `prompt_token_ids` (token fidelity). Another episode's token, a team key and
an unknown episode are refused, and so are an unsupported parameter and a non-number reward, each named.

The same agent as a service at `agent.url` (a small HTTP server this test starts): the platform POSTs each episode to
its /rollout, signed with the job's secret (the service refuses a bad signature); the service answers the reward.
Its first episode answers HTTP 500: that episode fails with an event naming it, the job goes on and succeeds. Both
tests check every trained token against what the agent was sent and the token fidelity of every recorded call
(tests/integration/token_fidelity.py), printing its TOKEN_FIDELITY line."""

from __future__ import annotations

import hmac
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest
from runtime_platform import Platform, base_spec
from token_fidelity import fidelity, model_dir
from transformers import AutoTokenizer
from waiting import api_in_thread, free_port

from backend.db.models import JobEvent, Team, User
from backend.services.auth import new_api_key
from contract import keys
from contract.gateway import episode_id_of, recorded_calls
from contract.settings import get_settings
from contract.signing import SIGNATURE_HEADER, sign
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "evaluate arithmetic",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}}]
ITERATIONS, PROMPTS, GROUP = 2, 2, 2


@dataclass
class Recorded:
    episode: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {messages, prompt_token_ids, token_ids}


@pytest.fixture(scope="module")
def api_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory, api_port: int) -> Any:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("gateway") / "chat", seed=0)
    # remote agents are handed this API's URL; the test's agent service listens on loopback, which the operator's
    # egress allow-list must name (in the workers, and in this process for the submit check)
    env = {"STREAMRL_PUBLIC_URL": f"http://127.0.0.1:{api_port}", "STREAMRL_EGRESS_ALLOW": "127.0.0.1"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STREAMRL_EGRESS_ALLOW", "127.0.0.1")
        get_settings.cache_clear()
        try:
            with Platform.start(pg_backend, redis_url, model_dir, generation_slots=2, extra_env=env) as running:
                yield running
        finally:
            patch.undo()
            get_settings.cache_clear()


@pytest.fixture(scope="module")
def api(platform: Platform, api_port: int) -> Any:
    with api_in_thread(platform.backend.settings, port=api_port) as url:
        yield url


def _team_key(platform: Platform) -> str:
    with platform.backend.session() as session:
        team, user = session.get(Team, platform.team.id), session.get(User, platform.user.id)
        return str(new_api_key(session=session, team=team, creator=user, name="agent", scopes=["read", "write"])[1])


def _drive(base_url: str, api_key: str, task: dict[str, Any], episode: str) -> tuple[Recorded, list[dict[str, Any]]]:
    """The agent: a plain openai loop, two calls (a tool call answered with a tool message, else a follow-up)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    recorded = Recorded(episode)
    messages: list[dict[str, Any]] = [{"role": "user", "content": str(task["prompt"])}]
    for turn in range(2):
        sent = json.loads(json.dumps(messages))
        answer = client.chat.completions.create(model="any-name", messages=sent, tools=TOOLS,  # type: ignore[arg-type]
                                                max_tokens=12, temperature=1.0, seed=turn)
        choice = answer.choices[0]
        recorded.calls.append({"messages": sent, "prompt_token_ids": (answer.model_extra or {})["prompt_token_ids"],
                               "token_ids": (choice.model_extra or {})["token_ids"]})
        message: dict[str, Any] = {"role": "assistant", "content": choice.message.content}
        if choice.message.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in choice.message.tool_calls]
        messages.append(message)
        if choice.message.tool_calls:
            messages += [{"role": "tool", "tool_call_id": c.id, "content": "4"} for c in choice.message.tool_calls]
        else:
            messages.append({"role": "user", "content": "Check it."})
    return recorded, messages


def _agent_episode(claimed: dict[str, Any], url: str) -> Recorded:
    """The claiming agent: the loop, a refused parameter and reward, then its reward."""
    client = openai.OpenAI(base_url=claimed["base_url"], api_key=claimed["api_key"], max_retries=0)
    recorded, messages = _drive(claimed["base_url"], claimed["api_key"], claimed["task"], claimed["episode"])
    with pytest.raises(openai.BadRequestError, match="response_format"):  # named, and never reaches the instance
        client.chat.completions.create(model="m", messages=messages,  # type: ignore[call-overload]
                                       response_format={"type": "json_object"})
    bad = httpx.post(f"{url}/api/v1/rollouts/{claimed['episode']}/reward", json={"reward": "high"},
                     headers={"Authorization": f"Bearer {claimed['api_key']}"}, timeout=30)
    assert bad.status_code == 400 and "reward must be a finite number" in bad.text, bad.text
    final = messages[-2]["content"] or ""
    reward = httpx.post(f"{url}/api/v1/rollouts/{claimed['episode']}/reward", json={"reward": float(len(final) % 3)},
                        headers={"Authorization": f"Bearer {claimed['api_key']}"}, timeout=30)
    assert reward.status_code == 200, reward.text
    return recorded


def _agents(platform: Platform, job_id: int, url: str, key: str, out: list[Recorded], errors: list[str]) -> None:
    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                claim = httpx.post(f"{url}/api/v1/jobs/{job_id}/rollouts/claim",
                                   headers={"Authorization": f"Bearer {key}"}, timeout=30)
                assert claim.status_code in (200, 204), claim.text
                if claim.status_code == 204:
                    if platform.job(job_id).status in (JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled):
                        return
                    stop.wait(0.2)
                    continue
                out.append(_agent_episode(claim.json(), url))
        except Exception as exc:  # noqa: BLE001 - surfaced by the test's assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        platform.wait_done(job_id, timeout_s=600)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def _gateway_spec(**overrides: Any) -> dict[str, Any]:
    spec = base_spec(environment={"type": "gateway", "max_turns": 4, "max_episode_tokens": 200},
                     algorithm={"name": "grpo", "group_size": GROUP},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": ITERATIONS, "prompts_per_iteration": PROMPTS, "micro_batch_size": 8,
                               "lr": 1e-3}, **overrides)
    del spec["reward"]  # an environment job's reward: the agent's (and environment.grader's, if any)
    return spec


def test_a_plain_openai_agent_trains_through_the_gateway(platform: Platform, api: str) -> None:
    key = _team_key(platform)
    job_id = platform.submit_as(platform.team, platform.user, _gateway_spec())
    recorded: list[Recorded] = []
    errors: list[str] = []
    _agents(platform, job_id, api, key, recorded, errors)
    # an episode's routes take its own token only
    other = recorded[0]
    refused = httpx.get(f"{api}/api/v1/rollouts/{other.episode}/v1/models",
                        headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert refused.status_code == 401, refused.text
    missing = httpx.get(f"{api}/api/v1/rollouts/ep-nope/v1/models", headers={"Authorization": "Bearer x"},
                        timeout=30)
    assert missing.status_code == 404, missing.text
    assert not errors, errors
    assert len(recorded) >= ITERATIONS * PROMPTS * GROUP
    _check_trained_tokens(platform, job_id, recorded)


class AgentService:
    """A remote agent at `agent.url`: POST /rollout {task, base_url, api_key, episode} runs `_drive` and answers
    {"reward": 1 if the answer is in the final message else 0}. A request whose signature is not the job's is
    refused (401); the first episode answers HTTP 500 (a dead agent)."""

    def __init__(self) -> None:
        self.secret: str | None = None
        self.ready = threading.Event()
        self.recorded: list[Recorded] = []
        self.refused: list[str] = []
        self.failed_on: list[str] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert service.ready.wait(60)
                assert service.secret is not None
                if self.path != "/rollout" or not hmac.compare_digest(
                        self.headers.get(SIGNATURE_HEADER, ""), sign(service.secret, body)):
                    service.refused.append(self.path)
                    return self._answer(401, {"error": "bad signature"})
                request = json.loads(body)
                if not service.failed_on:
                    service.failed_on.append(request["episode"])
                    return self._answer(500, {"error": "the agent crashed"})
                recorded, messages = _drive(request["base_url"], request["api_key"], request["task"],
                                            request["episode"])
                service.recorded.append(recorded)
                final = str(messages[-2]["content"] or "")
                return self._answer(200, {"reward": float(str(request["task"]["answer"]) in final)})

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_agent_service_at_agent_url_trains_and_a_dead_episode_does_not_fail_the_job(platform: Platform,
                                                                                        api: str) -> None:
    service = AgentService()
    try:
        key = _team_key(platform)
        spec = _gateway_spec(agent={"url": service.url, "concurrency": 2, "timeout_s": 120, "retries": 1},
                             failover={"reward_error_rate": 0.9})
        job_id = platform.submit_as(platform.team, platform.user, spec)
        signing = httpx.get(f"{api}/api/v1/jobs/{job_id}/rollouts/agent", headers={"Authorization": f"Bearer {key}"},
                            timeout=30)
        assert signing.status_code == 200, signing.text
        assert signing.json()["signature_header"] == SIGNATURE_HEADER
        service.secret = signing.json()["signing_secret"]
        service.ready.set()
        job = platform.wait_done(job_id, timeout_s=600)
        assert job.status == JobStatus.succeeded, job.error
    finally:
        service.close()
    assert not service.refused, service.refused  # every POST carried the job's signature
    assert len(service.failed_on) == 1 and len(service.recorded) >= ITERATIONS * PROMPTS * GROUP - 1
    with platform.backend.session() as session:
        from sqlalchemy import select

        events = [e.message for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job_id))]
    dead = service.failed_on[0]
    assert any(dead in message and "HTTP 500" in message for message in events), events
    _check_trained_tokens(platform, job_id, service.recorded)


def _check_trained_tokens(platform: Platform, job_id: int, recorded: list[Recorded]) -> None:
    """Every trained token is one the agent was sent (its `token_ids`, with a behaviour logprob), the loss mask covers
    completions only, the instance's record of each call is what the agent was sent, and the token-fidelity figures
    over every recorded call (tests/integration/token_fidelity.py; printed, 100% asserted)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir(platform))
    kept: dict[str, list[dict[str, Any]]] = {}
    for call in recorded_calls(platform.client, job_id):
        kept.setdefault(call["episode"], []).append(call)
    for episode in recorded:
        first, second = episode.calls
        head = first["prompt_token_ids"] + first["token_ids"]
        assert second["prompt_token_ids"][:len(head)] == head  # the agent kept its history: one sequence
        assert [(c["prompt_ids"], c["choices"][0]["ids"]) for c in kept[episode.episode]] == \
            [(c["prompt_token_ids"], c["token_ids"]) for c in episode.calls]
    figures = fidelity(platform, job_id, tokenizer)
    print(figures.line())
    figures.assert_complete()

    backend = platform.backend
    headers = backend.auth_headers(platform.user, platform.team)
    trained_tokens = 0
    with backend.client() as client:
        samples = client.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000},
                             headers=headers).json()["data"]
        by_episode = {episode_id_of(job_id, s["sample_id"]): s for s in samples}
        checked = merged = 0
        for episode in recorded:
            sample = by_episode.get(episode.episode)
            if sample is None:
                continue  # not among the stored samples
            tokens = client.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers)
            assert tokens.status_code == 200, tokens.text
            record = tokens.json()
            first, second = episode.calls
            head = first["prompt_token_ids"] + first["token_ids"]
            if second["prompt_token_ids"][:len(head)] == head:  # one sequence: both completions trained
                merged += 1
                context = second["prompt_token_ids"][len(head):]
                trained = [*first["token_ids"], *context, *second["token_ids"]]
                mask = [1] * len(first["token_ids"]) + [0] * len(context) + [1] * len(second["token_ids"])
            else:  # the prefix broke: the last call's sequence is trained
                trained, mask = second["token_ids"], [1] * len(second["token_ids"])
            assert record["pieces"] == [tokenizer.decode([t], skip_special_tokens=False) for t in trained]
            assert record["loss_mask"] == mask
            # every token that carries loss has its recorded behaviour logprob (context tokens: 0.0, no loss)
            assert all(lp < 0 for lp, m in zip(record["behaviour"], mask, strict=True) if m), record["behaviour"]
            trained_tokens += sum(mask)
            checked += 1
    assert checked >= 1 and merged == checked, (len(samples), checked, merged)
    print(f"episodes checked {checked}, merged into one sequence {merged}; {trained_tokens} trained tokens, each a "
          "recorded sampled token with its logprob")
    stats: dict[bytes, bytes] = platform.client.hgetall(keys.generator_stats(job_id))  # type: ignore[assignment]
    print({k.decode(): v.decode() for k, v in stats.items() if k.startswith(b"gateway")})
