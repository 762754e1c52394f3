"""`agent.code`: the user's agent run per episode in the jail (jailed.py), its only network a relay to that episode's
gateway (relay.py), its packages from `agent.requirements` (packages.py). One `JailedAgent` per generation instance;
the instance's `AgentRuns` (workers/runtime/remote_agent.py) calls it on `agent.concurrency` threads, one episode
each. It returns the reward the agent's `run` returned (None: the agent posted its own to the reward route, or
leaves the reward to the job's grader) and raises AgentCodeFailed with the reason otherwise: that episode fails,
never the job. A jail that died by a signal it did not send itself (killed from outside, OOM-killed, crashed) raises
AgentLost, and the gateway retries that episode from a clean start instead.

A jail runs up to `agent.episodes_per_jail` consecutive episodes of one lane, loading the code once (jailed.py
says what its episodes share and what not): after an episode that ended cleanly it goes back to the idle jails for
the next episode; after any other end (an error, a limit, lost, a thread left running) it is killed and the lane's
next jail started at once. A jail's last episode starts its replacement ahead: the new jail loads the agent's code
(its imports; `import agents` is ~2.4 s of CPU) while that episode runs, then waits for its first episode. So a
lane's next episode starts with its code loaded; the cost is one idle jail per lane (its memory) until the instance
stops. `episodes_per_jail: 1`: every episode's jail is such a replacement, started ahead by the episode before.

The packages are built in the background from the instance's start (the first episodes wait for them); a build
failure (naming the requirement) or a host without the jail fails every episode with that reason, which the job's
`reward_error` events and each sample's reward error show.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import httpx

from contract.agent import AgentSpec
from workers.agents.jailed import AgentJail, AgentJailUnavailable, check_jail
from workers.agents.packages import PackagesFailed, ensure_packages
from workers.agents.relay import EpisodeRelay

log = logging.getLogger(__name__)


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
        self._lock = threading.Lock()
        self._ready: list[tuple[AgentJail, EpisodeRelay]] = []  # idle jails (reused or started ahead), <= 1 per lane
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
        jail, relay = self._take_ready() or self._start(packages)
        last = jail.runs + 1 >= self.spec.episodes_per_jail
        if last:
            self._keep(self._start(packages))  # the lane's next jail loads the code while this episode runs
        try:
            relay.attach(task.episode)
            result = jail.run(task.task, task.api_key, timeout_s=left, cancel=self.stopped)
        finally:
            relay.detach()
            refused = list(relay.refused)
            reused = jail.reusable and not last and self._keep((jail, relay))
            if not reused:
                jail.kill()
                relay.close()
        if jail.retired:
            log.info("agent jail retired after %d episode(s): %s", jail.runs, jail.retired)
        if not reused and not last:
            self._keep(self._start(packages))  # ended early: the lane's next jail starts loading now
        if result.error is not None:
            refused_text = f" (refused: {', '.join(refused[:3])})" if refused else ""
            raise (AgentLost if result.lost else AgentCodeFailed)(f"{result.error}{refused_text}")
        return result.reward

    def _keep(self, idle: tuple[AgentJail, EpisodeRelay]) -> bool:
        """Put a jail among the idle ones for the next episodes; an instance that stopped ends it instead."""
        with self._lock:
            kept = not self.stopped.is_set()
            if kept:
                self._ready.append(idle)
        if not kept:
            idle[0].kill()
            idle[1].close()
        return kept

    def _take_ready(self) -> tuple[AgentJail, EpisodeRelay] | None:
        """An idle jail that is still alive, if any, one that already ran episodes first (one killed or crashed
        while it waited is ended here: never spend an episode on it)."""
        while True:
            with self._lock:
                if not self._ready:
                    return None
                index = max(range(len(self._ready)), key=lambda i: self._ready[i][0].runs)
                jail, relay = self._ready.pop(index)
            if jail.alive():
                return jail, relay
            jail.kill()
            relay.close()

    def _start(self, packages: str | None) -> tuple[AgentJail, EpisodeRelay]:
        """A jail for the lane's next episodes, loading the agent's code (its imports) before its first is given."""
        assert self.spec.code is not None
        relay = EpisodeRelay(self.http, self.gateway_url, None)
        try:
            return AgentJail(self.spec.code, relay.path, packages=packages, timeout_s=self.spec.timeout_s,
                             memory_mb=self.spec.memory_mb, episodes=self.spec.episodes_per_jail), relay
        except BaseException:
            relay.close()
            raise

    def close(self) -> None:
        with self._lock:
            self.stopped.set()  # running jails are killed within half a second
            ready, self._ready = self._ready, []
        for jail, relay in ready:
            jail.kill()
            relay.close()
        self._builder.shutdown(wait=False, cancel_futures=True)
        self.http.close()


def packages_dir(settings: Any) -> Path:
    """Where agents' packages are cached on this host: STREAMRL_AGENT_PACKAGES_DIR, else <data_dir>/agent-packages."""
    return Path(os.environ.get("STREAMRL_AGENT_PACKAGES_DIR") or Path(settings.data_dir) / "agent-packages")
