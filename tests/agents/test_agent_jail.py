"""Hostile `agent.code` (workers/agents/): the agent runs in a bubblewrap jail whose only network is a relay to its
current episode's gateway on the real API (uvicorn, Postgres, Redis). Network anywhere else (the API's own
port, Postgres, Redis, netlink), another episode's URL or token, another team's job, an endless loop, a fork bomb, a
thread bomb, a memory bomb, a flood of output, a huge request and a bad reward: each fails that episode with its
reason, and the same runner goes on to run a well-behaved episode."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from waiting import api_in_thread

from contract import gateway as keys
from contract.agent import AgentSpec
from workers.agents.runner import AgentCodeFailed, AgentLost, JailedAgent
from workers.rewards.jail import missing_piece

pytestmark = pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")

PROBE = '''
import json, socket, urllib.error, urllib.request

def status(url, token, method="GET", body=None):
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError):  # refused before the body was all sent: the socket is reset
        return 413

def run(task, base_url, api_key):
    breaches = []
    for host, port in task["tcp"]:
        try:
            socket.create_connection((host, port), timeout=2).close()
            breaches.append(f"tcp {host}:{port}")
        except OSError:
            pass
    for path in task["unix"]:
        try:
            socket.socket(socket.AF_UNIX).connect(path)
            breaches.append(path)
        except OSError:
            pass
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)
        breaches.append("netlink")
    except OSError:
        pass
    root = base_url[:-len("/v1")]
    seen = {
        "own": status(base_url + "/models", api_key),
        "other_token": status(base_url + "/models", task["other_token"]),
        "other_episode": status(root + "/../" + task["other_episode"] + "/v1/models", task["other_token"]),
        "other_episode_encoded": status(root + "/%2e%2e/" + task["other_episode"] + "/v1/models", api_key),
        "other_team_claim": status(root + "/../../jobs/%d/rollouts/claim" % task["other_job"], api_key, "POST", b"{}"),
        "huge_request": status(base_url + "/chat/completions", api_key, "POST", b"x" * (20 << 20)),
    }
    expected = {"own": 200, "other_token": 401, "other_episode": 404, "other_episode_encoded": 404,
                "other_team_claim": 404, "huge_request": 413}
    if breaches or seen != expected:
        raise AssertionError(json.dumps({"breaches": breaches, "seen": seen}))
    posted = status(root + "/reward", api_key, "POST", b'{"reward": 0.5}')  # its own reward ends its episode
    if posted != 200:
        raise AssertionError(f"reward: {posted}")
    return 1.0
'''

HOSTILE = {
    "endless loop": ("def run(task, base_url, api_key):\n    while True:\n        pass\n", "time limit exceeded"),
    "fork bomb": ("import os\ndef run(task, base_url, api_key):\n    while True:\n        os.fork()\n",
                  "PermissionError"),
    "subprocess": ("import subprocess\ndef run(task, base_url, api_key):\n"
                   "    subprocess.run(['/bin/sh', '-c', 'id'])\n", "PermissionError"),
    "thread bomb": ("import threading, time\ndef run(task, base_url, api_key):\n    while True:\n"
                    "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
                    "can't start new thread"),
    "memory bomb": ("def run(task, base_url, api_key):\n    return len(bytearray(8 << 30))\n", "MemoryError"),
    "output flood": ("import sys\ndef run(task, base_url, api_key):\n    while True:\n"
                     "        sys.stdout.write('x' * 65536)\n", "printed over 8 MB"),
    "huge reward": ("def run(task, base_url, api_key):\n    return 'x' * (50 << 20)\n", "must return a number"),
    "infinite reward": ("def run(task, base_url, api_key):\n    return float('inf')\n", "finite"),
    "exit": ("import os\ndef run(task, base_url, api_key):\n    os._exit(3)\n", "exited with status 3"),
    "crash": ("import os, signal\ndef run(task, base_url, api_key):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
              "killed by SIGSEGV"),
}
LOST = {"crash"}  # the jail died by a signal: AgentLost, which the gateway retries; the rest are the agent's own
GOOD = "def run(task, base_url, api_key):\n    return 0.25 + task['n']\n"


@dataclass
class Episode:
    episode: str
    task: dict[str, Any]
    api_key: str


@pytest.fixture(scope="module")
def gateway(pg_backend: Any, redis_url: str) -> Iterator[tuple[str, redis.Redis]]:
    client = redis.Redis.from_url(redis_url)
    with api_in_thread(pg_backend.settings) as url:
        yield url, client
    client.close()


def _episode(client: redis.Redis, job_id: int, task: dict[str, Any]) -> Episode:
    """An episode as a gateway instance opens it (workers/runtime/gateway.py), already claimed by its agent."""
    episode_id, token = f"ep-test-{random.randrange(10**12)}", keys.new_token()
    client.hset(keys.episode(episode_id), mapping={"job": job_id, "instance": "i-test", "token_sha": keys.token_sha(
        token), "task": json.dumps(task), "state": "claimed", "token": token})
    client.expire(keys.episode(episode_id), 600)
    return Episode(episode_id, task, token)


def _agent(code: str, url: str, tmp_path: Path, timeout_s: float = 30, episodes_per_jail: int = 32) -> JailedAgent:
    return JailedAgent(AgentSpec(code=code, timeout_s=timeout_s, memory_mb=1024, episodes_per_jail=episodes_per_jail),
                       gateway_url=url, cache_dir=tmp_path / "packages")


def test_the_agent_reaches_its_own_gateway_and_nothing_else(gateway: tuple[str, redis.Redis],
                                                            tmp_path: Path) -> None:
    url, client = gateway
    job_id, other_job = random.randrange(10**8, 10**9), random.randrange(10**8, 10**9)
    other = _episode(client, job_id, {})
    client.lpush(keys.open_episodes(other_job), "ep-other-team")  # another team's job with an open episode
    api_port = urlsplit(url).port
    task = {"tcp": [["127.0.0.1", api_port], ["127.0.0.1", 5432], ["127.0.0.1", 6379], ["::1", 5432]],
            "unix": ["/var/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5432", "/run/redis/redis.sock"],
            "other_token": other.api_key, "other_episode": other.episode, "other_job": other_job}
    mine = _episode(client, job_id, task)
    agent = _agent(PROBE, url, tmp_path)
    try:
        assert agent(mine) == 1.0  # the probe raises (failing the episode) on any breach or unexpected status
    finally:
        agent.close()
    assert client.lrange(keys.open_episodes(other_job), 0, -1) == [b"ep-other-team"]  # nobody claimed it
    assert client.hget(keys.episode(other.episode), "state") == b"claimed"
    assert client.hmget(keys.episode(mine.episode), ["state", "reward"]) == [b"ended", b"0.5"]
    client.delete(keys.ended(job_id, "i-test"))
    client.delete(keys.open_episodes(other_job), keys.episode(other.episode), keys.episode(mine.episode))


KEEPS_KEYS = '''
import urllib.error, urllib.request

KEYS = []  # a module global: it outlives the episode in a reused jail

def status(url, key):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code

def run(task, base_url, api_key):
    KEYS.append(api_key)
    return float("".join(str(status(base_url + "/models", key)) for key in KEYS))
'''


def test_a_token_kept_from_an_earlier_episode_of_the_jail_is_refused(gateway: tuple[str, redis.Redis],
                                                                     tmp_path: Path) -> None:
    """Two episodes on one jail: the second tries the first's token (kept in a global) at its base URL (the only
    gateway its relay reaches now): 401; its own: 200. (An ended episode's own URL is never reachable from the jail
    again; the API's 409 for it is tests/api/test_gateway_keyed_path.py's.)"""
    url, client = gateway
    agent = _agent(KEEPS_KEYS, url, tmp_path)
    first, second = _episode(client, 1, {}), _episode(client, 1, {})
    try:
        assert agent(first) == 200.0
        client.hset(keys.episode(first.episode), "state", "ended")  # as the gateway ends it
        assert agent(second) == 401200.0  # the first's token, then its own, from the same process
    finally:
        agent.close()
    client.delete(keys.episode(first.episode), keys.episode(second.episode))


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_agent_fails_its_episode_and_the_runner_goes_on(gateway: tuple[str, redis.Redis], tmp_path: Path,
                                                                  case: str) -> None:
    url, client = gateway
    code, reason = HOSTILE[case]
    agent = _agent(code, url, tmp_path, timeout_s=4 if case == "endless loop" else 30)
    good = _agent(GOOD, url, tmp_path)
    try:
        with pytest.raises(AgentCodeFailed, match=reason) as failed:
            agent(_episode(client, 1, {"n": 0}))
        assert isinstance(failed.value, AgentLost) == (case in LOST), failed.value
        assert good(_episode(client, 1, {"n": 1})) == 1.25  # the next episode runs as usual
    finally:
        agent.close()
        good.close()


AHEAD = '''
import time
LOADED = time.time()  # the code's load (an agent's imports) runs when its jail starts, before it has an episode
def run(task, base_url, api_key):
    if task["n"] == 0:
        time.sleep(1.0)  # the first episode lasts long enough for the next jail to start loading
    return LOADED
'''
BROKEN_LOAD = "import no_such_module_here\ndef run(task, base_url, api_key):\n    return 1.0\n"


def test_each_episode_gets_a_fresh_jail_whose_code_was_loaded_ahead(tmp_path: Path) -> None:
    """episodes_per_jail=1: a lane's next jail is started (its code loaded) while the current episode runs; each
    episode has its own jail; one killed while it waits is replaced, not spent; a code that fails to load fails each
    episode with its reason (with reuse too: a failed episode ends its jail). No gateway call is made (no API
    needed)."""
    agent = _agent(AHEAD, "http://127.0.0.1:9", tmp_path, episodes_per_jail=1)
    broken = _agent(BROKEN_LOAD, "http://127.0.0.1:9", tmp_path)
    try:
        first_called = time.time()
        first = agent(Episode("ep-ahead-0", {"n": 0}, "k0"))
        second_called = time.time()
        second = agent(Episode("ep-ahead-1", {"n": 1}, "k1"))
        assert first is not None and second is not None
        assert first_called < first and first_called < second < second_called  # loaded before its episode came
        assert second != first  # by another jail (both started at the first episode: either loads first)
        (waiting, _), = agent._ready
        os.killpg(waiting.proc.pid, signal.SIGKILL)  # a jail killed while it waits is never given an episode
        waiting.proc.wait(timeout=30)
        assert agent(Episode("ep-ahead-2", {"n": 2}, "k2")) is not None
        for n in range(2):  # the failure is each episode's, loaded ahead or not
            with pytest.raises(AgentCodeFailed, match="ModuleNotFoundError: No module named 'no_such_module_here'"):
                broken(Episode(f"ep-broken-{n}", {"n": n}, "k"))
    finally:
        agent.close()
        broken.close()
    assert agent._ready == [] and broken._ready == []
