"""Agents a gateway job's instance starts per episode (`JobSpec.agent`; docs/user-guide.md, "Train an agent
you already have").

`AgentRuns` runs each opened episode's agent on `agent.concurrency` threads of the instance (episodes past that wait
their turn) and hands back, per episode, the reward the agent answered (None: it posted its own to the reward
endpoint, or leaves it to the job's grader) or why it failed. A failure fails that episode, never the job; a jailed
agent whose jail died (`lost`: killed, OOM-killed, crashed) has its episode retried by the gateway.

`RemoteAgent` is the agent behind `agent.url`: one POST of `{task, base_url, api_key, episode}` (JSON) to
`{url}/rollout` per episode, signed like the alert webhooks (contract/signing.py: `X-StreamRL-Signature` under the
job's agent secret, GET /jobs/{id}/rollouts/agent), through the egress policy's guarded client (contract/egress.py:
only addresses the operator allows; no redirects, no environment proxies). Connection errors are retried
`agent.retries` times (the agent never saw the episode); a connection the agent dropped before answering (its
process restarted or crashed mid-episode) has the episode retried from a clean start, as a lost jail's is; a timeout,
an HTTP error status or an answer that is not `{}` / `{"reward": number | null}` fail the episode with that reason.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from contract.agent import AgentSpec
from contract.egress import EgressRefused, guarded_client, parse_url
from contract.environments import VERIFIERS
from contract.settings import Settings, get_settings
from contract.signing import SIGNATURE_HEADER, agent_secret, sign
from contract.spec import JobSpec
from contract.verifiers import DEFAULT_CONCURRENCY
from workers.agents.runner import AgentLost, JailedAgent, packages_dir
from workers.environments.verifiers_gateway import verifiers_agent
from workers.environments.verifiers_served import ServedFailed, ServedVerifiers

MAX_ANSWER_BYTES = 64 * 1024
RETRY_BACKOFF_S = 0.5


class AgentFailed(Exception):
    """The agent's episode failed; the message says why (it becomes the episode's error)."""


class AgentDropped(AgentFailed):
    """`agent.url` took the episode, then closed the connection without an answer (its process restarted or
    crashed): like a lost jail, not the agent's own answer, so the gateway retries the episode from a clean start (a
    new episode id and token: whatever the dropped attempt called is discarded), a bounded number of times."""


@dataclass
class AgentTask:
    episode: str
    task: dict[str, Any]
    base_url: str
    api_key: str


@dataclass(frozen=True)
class AgentDone:
    episode: str
    reward: float | None
    error: str | None
    lost: bool = False  # the agent's jail died (killed, OOM, crashed), not the agent's own failure: retryable


def answered_reward(answer: Any) -> float | None:
    """The reward in an agent's answer: `{"reward": number | null}`, `{}` or an empty body; AgentFailed otherwise."""
    if answer is None or answer == {}:
        return None
    if not isinstance(answer, dict) or "reward" not in answer:
        raise AgentFailed(f"the agent's answer must be {{\"reward\": number | null}} (got {str(answer)[:80]!r})")
    reward = answer["reward"]
    if reward is None:
        return None
    if isinstance(reward, bool) or not isinstance(reward, int | float) or not math.isfinite(reward):
        raise AgentFailed(f"the agent's reward must be a finite number or null (got {str(reward)[:40]!r})")
    return float(reward)


class RemoteAgent:
    """POSTs an episode to `{agent.url}/rollout` (see the module doc)."""

    def __init__(self, spec: AgentSpec, settings: Settings, job_id: int):
        assert spec.url is not None
        parse_url(spec.url)  # checked at submit too; a spec stored before the policy fails here, per episode
        self.url, self.spec = f"{spec.url.rstrip('/')}/rollout", spec
        self.secret = agent_secret(settings.secret_key, job_id)
        self.http = guarded_client(settings, timeout=httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s)))

    def __call__(self, task: AgentTask) -> float | None:
        body = json.dumps({"task": task.task, "base_url": task.base_url, "api_key": task.api_key,
                           "episode": task.episode}, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "StreamRL-Agent/1",
                   "X-StreamRL-Episode": task.episode, SIGNATURE_HEADER: sign(self.secret, body)}
        for attempt in range(self.spec.retries + 1):
            try:
                response = self.http.post(self.url, content=body, headers=headers)
                break
            except httpx.ConnectError as exc:  # nothing reached the agent: safe to try again
                if attempt == self.spec.retries:
                    raise AgentFailed(f"agent.url {self.spec.url} unreachable after {attempt + 1} attempts: "
                                      f"{exc}"[:400]) from None
                time.sleep(RETRY_BACKOFF_S * 2**attempt)
            except httpx.TimeoutException:
                raise AgentFailed(f"agent.url {self.spec.url} did not answer within agent.timeout_s="
                                  f"{self.spec.timeout_s:g}") from None
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:  # reached it, then dropped mid-episode
                raise AgentDropped(f"agent.url {self.spec.url} dropped the connection before answering: "
                                   f"{exc}"[:400]) from None
            except (httpx.HTTPError, EgressRefused) as exc:
                raise AgentFailed(f"agent.url {self.spec.url}: {exc}"[:400]) from None
        if not 200 <= response.status_code < 300:
            raise AgentFailed(f"agent.url {self.spec.url} answered HTTP {response.status_code}")
        if len(response.content) > MAX_ANSWER_BYTES:
            raise AgentFailed(f"agent.url {self.spec.url}: answer larger than {MAX_ANSWER_BYTES} bytes")
        try:
            answer = response.json() if response.content.strip() else None
        except ValueError:
            raise AgentFailed(f"agent.url {self.spec.url}: the answer is not JSON") from None
        return answered_reward(answer)

    def close(self) -> None:
        self.http.close()


class AgentRuns:
    """Each started episode's agent on one of `concurrency` threads; `finished()` returns what ended since."""

    def __init__(self, run: Callable[[AgentTask], float | None], concurrency: int, timeout_s: float, base_url: str,
                 close: Callable[[], None] | None = None):
        """`base_url`: the API's, agents get `{base_url}/rollouts/{episode}/v1`; `timeout_s`: an episode's limit
        from its agent's start (GatewayEpisodes enforces it)."""
        self.run, self._close, self.timeout_s, self.base_url = run, close, timeout_s, base_url.rstrip("/")
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="agent")
        self.done: queue.SimpleQueue[AgentDone] = queue.SimpleQueue()
        self.started: dict[str, float] = {}  # episode -> monotonic time its agent started (not queued)
        self._lock = threading.Lock()

    def start(self, task: AgentTask) -> None:
        self.pool.submit(self._one, task)

    def _one(self, task: AgentTask) -> None:
        with self._lock:
            self.started[task.episode] = time.monotonic()
        try:
            self.done.put(AgentDone(task.episode, self.run(task), None))
        except (AgentLost, AgentDropped) as exc:
            self.done.put(AgentDone(task.episode, None, str(exc), lost=True))
        except (AgentFailed, ServedFailed) as exc:
            self.done.put(AgentDone(task.episode, None, str(exc)))
        except Exception as exc:  # noqa: BLE001 - the agent's failure is its episode's, never the instance's
            self.done.put(AgentDone(task.episode, None, f"the agent failed: {type(exc).__name__}: {exc}"[:400]))

    def running_since(self, episode: str) -> float | None:
        with self._lock:
            return self.started.get(episode)

    def finished(self) -> list[AgentDone]:
        out: list[AgentDone] = []
        while True:
            try:
                done = self.done.get_nowait()
            except queue.Empty:
                return out
            with self._lock:
                self.started.pop(done.episode, None)
            out.append(done)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self._close is not None:
            self._close()


def agent_runs(spec: JobSpec, job_id: int, settings: Settings | None = None) -> AgentRuns | None:
    """The runs of the job's `agent`, of a verifiers environment's episode loop in the jail, or of the episodes of a
    verifiers env server at its `url` (None: agents claim its episodes through the API)."""
    agent = spec.agent
    settings = settings or get_settings()
    base_url = f"{settings.public_url.rstrip('/')}/api/v1"
    environment = spec.environment
    if agent is None and environment is not None and environment.type == VERIFIERS:
        if environment.url is not None:  # the user's verifiers env server plays the episodes
            served = ServedVerifiers(environment.url, settings, environment.episode_timeout_s)
            concurrency = int(environment.params.get("concurrency", DEFAULT_CONCURRENCY))
            return AgentRuns(served, concurrency, environment.episode_timeout_s, base_url, served.close)
        agent = verifiers_agent(environment)
    if agent is None:
        return None
    if agent.url is not None:
        remote = RemoteAgent(agent, settings, job_id)
        return AgentRuns(remote, agent.concurrency, agent.timeout_s, base_url, remote.close)
    jailed = JailedAgent(agent, gateway_url=settings.public_url, cache_dir=packages_dir(settings))  # agent.code
    return AgentRuns(jailed, agent.concurrency, agent.timeout_s, base_url, jailed.close)
