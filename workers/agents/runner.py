"""`agent.code`: the user's agent run per episode in the jail (jailed.py), its only network a relay to that episode's
gateway (relay.py), its packages from `agent.requirements` (packages.py). One `JailedAgent` per generation instance;
the instance's `AgentRuns` (workers/runtime/remote_agent.py) calls it on `agent.concurrency` threads, one episode
each. It returns the reward the agent's `run` returned (None: the agent posted its own to the reward route, or
leaves the reward to the job's grader) and raises AgentCodeFailed with the reason otherwise: that episode fails,
never the job. A jail that died by a signal it did not send itself (killed from outside, OOM-killed, crashed) raises
AgentLost, and the gateway retries that episode from a clean start instead.

The packages are built in the background from the instance's start (the first episodes wait for them); a build
failure (naming the requirement) or a host without the jail fails every episode with that reason, which the job's
`reward_error` events and each sample's reward error show.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import httpx

from contract.agent import AgentSpec
from workers.agents.jailed import AgentJailUnavailable, check_jail, run_agent
from workers.agents.packages import PackagesFailed, ensure_packages
from workers.agents.relay import EpisodeRelay


class EpisodeTask(Protocol):  # workers/runtime/remote_agent.py AgentTask
    episode: str
    task: dict[str, Any]
    api_key: str


class AgentCodeFailed(Exception):
    """The jailed agent's episode failed; the message says why."""


class AgentLost(AgentCodeFailed):
    """The agent's jail died by a signal it did not send itself (killed, OOM-killed, crashed): not the agent's own
    failure, so its episode is retried from a clean start (workers/runtime/gateway.py), a bounded number of times."""


class JailedAgent:
    def __init__(self, spec: AgentSpec, *, gateway_url: str, cache_dir: Path):
        """`gateway_url`: the API's base URL as this worker reaches it (settings.public_url)."""
        assert spec.code is not None
        self.spec, self.gateway_url = spec, gateway_url
        self.stopped = threading.Event()
        self.http = httpx.Client(timeout=httpx.Timeout(spec.timeout_s, connect=10.0), follow_redirects=False,
                                 trust_env=False)
        self._builder = ThreadPoolExecutor(1, thread_name_prefix="agent-packages")
        self.packages: Future[str | None] = self._builder.submit(self._build, cache_dir)

    def _build(self, cache_dir: Path) -> str | None:
        check_jail()
        return ensure_packages(self.spec.requirements, cache_dir)

    def __call__(self, task: EpisodeTask) -> float | None:
        started = time.monotonic()  # agent.timeout_s counts from here, waiting for the packages included
        try:
            packages = self.packages.result(timeout=self.spec.timeout_s)
        except (PackagesFailed, AgentJailUnavailable) as exc:
            raise AgentCodeFailed(str(exc)) from None
        except TimeoutError:
            raise AgentCodeFailed(f"agent.requirements still installing after agent.timeout_s="
                                  f"{self.spec.timeout_s:g}") from None
        if self.stopped.is_set():
            raise AgentCodeFailed("the instance stopped")
        left = self.spec.timeout_s - (time.monotonic() - started)
        if left <= 0:
            raise AgentCodeFailed(f"agent.timeout_s={self.spec.timeout_s:g} spent waiting for agent.requirements")
        relay = EpisodeRelay(self.http, self.gateway_url, task.episode)
        try:
            assert self.spec.code is not None
            result = run_agent(self.spec.code, task.task, task.api_key, relay.path, packages=packages,
                               timeout_s=left, memory_mb=self.spec.memory_mb, cancel=self.stopped)
        finally:
            relay.close()
        if result.error is not None:
            refused = f" (refused: {', '.join(relay.refused[:3])})" if relay.refused else ""
            raise (AgentLost if result.lost else AgentCodeFailed)(f"{result.error}{refused}")
        return result.reward

    def close(self) -> None:
        self.stopped.set()  # running jails are killed within half a second
        self._builder.shutdown(wait=False, cancel_futures=True)
        self.http.close()


def packages_dir(settings: Any) -> Path:
    """Where agents' packages are cached on this host: STREAMRL_AGENT_PACKAGES_DIR, else <data_dir>/agent-packages."""
    return Path(os.environ.get("STREAMRL_AGENT_PACKAGES_DIR") or Path(settings.data_dir) / "agent-packages")
