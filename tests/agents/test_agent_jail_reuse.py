"""Jail reuse (workers/agents/jailed.py, agent_child.py, runner.py): a jail runs up to `agent.episodes_per_jail`
consecutive episodes of a lane, loading the agent's code once; an episode that does not end cleanly (an error, the
wall clock, the CPU limit, a thread of its own left running, a reply it forged) ends its jail and the lane's next
episode gets a fresh one; the scratch is wiped between episodes; the CPU limit counts per episode in a reused jail.
No gateway call is made (no API needed); a token kept from an earlier episode is tests/agents/test_agent_jail.py's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract.agent import AgentSpec
from workers.agents.jailed import AgentJail
from workers.agents.relay import EpisodeRelay
from workers.agents.runner import AgentCodeFailed, JailedAgent
from workers.rewards.jail import missing_piece

pytestmark = pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")
NOWHERE = "http://127.0.0.1:9"  # no gateway: these agents make no call

# Each episode returns 10 * (episodes this jail's process has run) + the task's n: the count is a module global set
# when the code loads, so it tells which episode of its jail each one was. Each also checks it starts in an empty
# scratch as its cwd, then leaves files behind (one in a directory it made unreadable) and its cwd elsewhere.
COUNTING = '''
import asyncio, os, sys, threading, time

RUNS = []

async def run(task, base_url, api_key):
    if os.getcwd() != "/scratch" or os.listdir("/scratch"):
        raise AssertionError(f"not a clean scratch: {os.getcwd()} {os.listdir('/scratch')}")
    RUNS.append(task["n"])
    await asyncio.get_running_loop().run_in_executor(None, time.sleep, 0.01)  # asyncio.run joins its executor
    threading.Thread(target=time.sleep, args=(0.05,)).start()  # ends within the harness's grace: not left running
    with open(f"note-{task['n']}", "w") as note:
        note.write("for the next episode?")
    os.makedirs("locked/inner")
    open("locked/inner/file", "w").close()
    os.chmod("locked/inner", 0)
    os.chmod("locked", 0o500)
    os.chdir(os.environ["HOME"])
    os.mkdir("elsewhere")
    os.chdir("elsewhere")
    if task.get("do") == "fail":
        raise ValueError("asked to fail")
    if task.get("do") == "sleep":
        await asyncio.sleep(60)
    if task.get("do") == "thread":
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    if task.get("do") == "forge":  # a reply of its own on the harness's reply pipe, then the harness's
        os.write(int(sys.argv[1]), b'{"ok": true, "reward": 99.0, "retire": null}\\n')
        time.sleep(0.2)
    return 10 * len(RUNS) + task["n"]
'''


@dataclass
class Episode:
    episode: str
    task: dict[str, Any]
    api_key: str


def _agent(tmp_path: Path, episodes_per_jail: int, timeout_s: float = 30) -> JailedAgent:
    spec = AgentSpec(code=COUNTING, timeout_s=timeout_s, memory_mb=1024, episodes_per_jail=episodes_per_jail)
    return JailedAgent(spec, gateway_url=NOWHERE, cache_dir=tmp_path / "packages")


def _run(agent: JailedAgent, n: int, **task: Any) -> float | None:
    return agent(Episode(f"ep-reuse-{n}", {"n": n, **task}, f"key-{n}"))


def test_a_jail_runs_its_episodes_on_one_load_with_a_clean_scratch_each(tmp_path: Path) -> None:
    agent = _agent(tmp_path, episodes_per_jail=3)
    fresh = _agent(tmp_path, episodes_per_jail=1)
    try:
        # one lane: 3 episodes per jail, then the replacement started ahead during the 3rd takes over
        assert [_run(agent, n) for n in range(7)] == [10, 21, 32, 13, 24, 35, 16]
        # episodes_per_jail=1: every episode on a fresh jail (loaded ahead), nothing carried over
        assert [_run(fresh, n) for n in range(3)] == [10, 11, 12]
        assert len(agent._ready) == len(fresh._ready) == 1  # one idle jail per lane
    finally:
        agent.close()
        fresh.close()
    assert agent._ready == [] and fresh._ready == []


def test_an_episode_that_does_not_end_cleanly_ends_its_jail(tmp_path: Path) -> None:
    agent = _agent(tmp_path, episodes_per_jail=100, timeout_s=6)
    try:
        assert [_run(agent, 0), _run(agent, 1)] == [10, 21]
        with pytest.raises(AgentCodeFailed, match="ValueError: asked to fail"):
            _run(agent, 2, do="fail")
        assert [_run(agent, 3), _run(agent, 4)] == [13, 24]  # a fresh jail: its first episode
        with pytest.raises(AgentCodeFailed, match=r"time limit exceeded \(agent.timeout_s"):
            _run(agent, 5, do="sleep")
        assert _run(agent, 6, do="thread") == 16  # succeeds, but leaves a thread running: its jail ends
        assert [_run(agent, 7), _run(agent, 8)] == [17, 28]
        with pytest.raises(AgentCodeFailed, match="out of step"):  # a reply line the harness did not write
            _run(agent, 9, do="forge")
        assert _run(agent, 10) == 20  # not the harness's late reply to the forged episode: a fresh jail's first
    finally:
        agent.close()


BURN = '''
import time

def run(task, base_url, api_key):
    start = time.process_time()
    while task["spin"] or time.process_time() - start < task["cpu_s"]:
        pass
    return 1.0
'''


def test_the_cpu_limit_counts_per_episode_in_a_reused_jail(tmp_path: Path) -> None:
    """1 CPU second per episode (each gets between 1 and 2 s: the limit is whole seconds): three episodes of 0.7 s
    pass the first episode's limit together, each within its own; an endless loop in the fourth ends the jail by
    SIGXCPU, well before its wall clock."""
    relay = EpisodeRelay(httpx.Client(), NOWHERE, None)
    jail = AgentJail(BURN, relay.path, packages=None, timeout_s=60, memory_mb=1024, episodes=10, cpu_s=1)
    try:
        for _ in range(3):
            result = jail.run({"spin": False, "cpu_s": 0.7}, "key", timeout_s=60)
            assert (result.error, result.reward, jail.reusable) == (None, 1.0, True)
        result = jail.run({"spin": True, "cpu_s": 0}, "key", timeout_s=60)
        assert result.error is not None and result.error.startswith("CPU time limit exceeded"), result.error
        assert result.seconds < 30 and not result.lost and not jail.reusable
    finally:
        jail.kill()
        relay.close()
