"""`environment.type: verifiers` with a `url`: the user's own verifiers env server (verifiers 0.4
`verifiers.v1.serve.EnvServer`, ZMQ at `tcp://host:port`) plays the episodes; this worker is its client (verifiers'
own `EnvClient`), one `run` request per episode.

Each request carries the episode's dataset row as the task's data (the server validates it into its taskset's
`TaskData`) and a model client config whose base URL is the episode's gateway with its token in the path
(`.../rollouts/{episode}/key/{token}/v1`, backend/api/routes/rollouts.py): a served env's model client sends its own
process's key (`ClientConfig.api_key_var`) as the bearer, so the token cannot travel as the key. The gateway samples
and records every call exactly as for an in-jail episode (the trained tokens are the recorded sampled tokens); the
reward is verifiers' scoring of the episode's one trainable trace, as the in-jail driver takes it.

The address passes the egress policy at submit (contract/egress.py `parse_tcp`) and again at each connection: the
host is resolved, each address checked (`Policy.connect_address`: a tenant URL never reaches the platform's own
services, loopback or private ranges unless the operator allows them), and ZMQ connects to the checked IP address,
never to the name. IPv6-only servers are refused (the client socket is IPv4).

A server that goes away mid-episode (ZMQ reports the connection dropped) loses every run in flight on it: each
raises `AgentLost`, so the gateway retries that episode from a clean start (workers/runtime/gateway.py, up to
MAX_EPISODE_RETRIES), and the next run reconnects (re-resolving and re-checking the address), waiting up to
CONNECT_WAIT_S for the server to answer its health check.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import zmq

from contract.egress import EgressRefused, parse_tcp, policy_of
from contract.settings import Settings
from workers.agents.runner import AgentLost
from workers.environments.verifiers_driver import _failure, trained_reward

KEY_VAR = "STREAMRL_GATEWAY_KEY_IN_PATH"  # the served env's key variable: unset on its server, it sends "EMPTY"
MODEL = "policy"
CONNECT_WAIT_S = 300.0  # a (re)starting server: how long a run waits for its health check


class ServedFailed(Exception):
    """The served episode failed; the message says why (workers/runtime/remote_agent.py AgentRuns makes it the
    episode's error)."""


def keyed_base_url(base_url: str, token: str) -> str:
    """The episode's gateway base URL (`.../rollouts/{episode}/v1`) with its token in the path."""
    if not base_url.endswith("/v1"):
        raise ValueError(f"not a gateway base URL: {base_url!r}")
    return f"{base_url[:-3]}/key/{token}/v1"


def served_reward(episode: Any) -> float | None:
    """verifiers' scoring of the episode's one trainable trace (ServedFailed: the episode failed, or it is not one
    trainable conversation)."""
    if not episode.ok:
        raise ServedFailed(f"the verifiers env server's episode failed: {_failure(episode)}"[:900])
    frozen = sorted({t.agent.name for t in episode.traces if not t.agent.trainable and t.calls})
    if frozen:
        raise ServedFailed(f"roles {frozen} are not trainable but made model calls; every model call of a served "
                           "episode goes through the gateway and is trained")
    return trained_reward(episode, ServedFailed, ServedFailed)


class ServedVerifiers:
    """`run(task) -> reward` for AgentRuns' threads: the episode as one `EnvClient.run` on this object's event loop
    (a thread of its own; the ZMQ socket lives there)."""

    def __init__(self, url: str, settings: Settings, timeout_s: float):
        self.url, self.target, self.policy, self.timeout_s = url, parse_tcp(url), policy_of(settings), timeout_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="verifiers-client", daemon=True)
        self.thread.start()
        self.client: Any = None  # verifiers' EnvClient, made on first use and after a lost connection
        self.answered: Any = None  # the client whose server has answered its health check
        self.runs: dict[asyncio.Task[Any], Any] = {}  # run -> the client it was sent on
        self.lost: set[asyncio.Task[Any]] = set()
        self._watchers: set[asyncio.Task[None]] = set()

    def __call__(self, task: Any) -> float | None:  # workers/runtime/remote_agent.py AgentTask
        future = asyncio.run_coroutine_threadsafe(self._run(task), self.loop)
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeout:
            future.cancel()
            raise ServedFailed(f"the verifiers env server at {self.url} did not finish the episode within "
                               f"environment.episode_timeout_s={self.timeout_s:g}") from None

    def _connect(self) -> Any:
        from verifiers.v1.serve.client import EnvClient

        try:
            address = ipaddress.ip_address(self.policy.connect_address(self.target.host, self.target.port))
        except EgressRefused as exc:
            raise ServedFailed(f"environment.url is refused: {exc}") from None
        except OSError as exc:
            raise ServedFailed(f"environment.url {self.url}: {self.target.host} does not resolve ({exc})") from None
        if address.version != 4:
            raise ServedFailed(f"environment.url {self.url}: only IPv4 servers are supported (got {address})")
        client = EnvClient(f"tcp://{address}:{self.target.port}")
        watcher = self.loop.create_task(self._watch(client))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return client

    async def _watch(self, client: Any) -> None:
        """On the connection's drop (a server that died or restarted), lose every run sent on this client."""
        monitor = client.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            while True:
                frames = await monitor.recv_multipart()
                if struct.unpack("=hi", frames[0][:6])[0] == zmq.EVENT_DISCONNECTED:
                    break
        except asyncio.CancelledError:
            return
        finally:
            with contextlib.suppress(zmq.ZMQError):
                client.socket.disable_monitor()
            monitor.close(linger=0)
        if self.client is client:
            self.client = None
        for run, sent_on in list(self.runs.items()):
            if sent_on is client:
                self.lost.add(run)
                run.cancel()
        await asyncio.sleep(0)  # let the cancelled runs send their cancels before the socket closes
        await client.close()

    async def _run(self, task: Any) -> float | None:
        from verifiers.v1.configs.client import EvalClientConfig
        from verifiers.v1.types import SamplingConfig

        if self.client is None:
            self.client = self._connect()
        client = self.client
        if client is not self.answered:  # a new connection: wait for the (re)starting server once, not per episode
            try:
                await client.wait_for_server_startup(timeout=CONNECT_WAIT_S, interval=1.0)
            except TimeoutError:
                raise ServedFailed(f"the verifiers env server at {self.url} did not answer its health check within "
                                   f"{CONNECT_WAIT_S:g}s") from None
            except zmq.ZMQError as exc:  # the connection dropped while waiting: _watch closed this client under it
                raise AgentLost(f"the connection to the verifiers env server at {self.url} dropped before the "
                                f"episode started: {exc}") from None
            self.answered = client
        me = asyncio.current_task()
        assert me is not None
        self.runs[me] = client
        config = EvalClientConfig(base_url=keyed_base_url(task.base_url, task.api_key), api_key_var=KEY_VAR)
        try:
            episode = await client.run(config, MODEL, SamplingConfig(), dict(task.task))
        except asyncio.CancelledError:
            if me in self.lost:
                raise AgentLost(f"the connection to the verifiers env server at {self.url} dropped "
                                "mid-episode") from None
            raise
        except zmq.ZMQError as exc:  # the client was closed under this run: its connection dropped
            raise AgentLost(f"the connection to the verifiers env server at {self.url} dropped: {exc}") from None
        except RuntimeError as exc:  # the server's own failure reply
            raise ServedFailed(f"the verifiers env server at {self.url}: {exc}"[:900]) from None
        finally:
            self.runs.pop(me, None)
            self.lost.discard(me)
        return served_reward(episode)

    def close(self) -> None:
        async def shut() -> None:
            for run in list(self.runs):
                run.cancel()
            for watcher in list(self._watchers):
                watcher.cancel()
            if self.client is not None:
                await self.client.close()
                self.client = None

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
