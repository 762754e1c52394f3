"""`environment.type: verifiers` on the real platform (Celery workers, Postgres, Redis, the API on uvicorn): a
multi-turn environment written with verifiers' own API (0.4, `verifiers.v1`: a `Taskset` of tasks scored by a
`@vf.reward`, and an `Env` whose `run` plays three turns through `interaction(...).turn`) runs per episode in the
agent jail, verifiers' own loop calling the policy through the episode's rollout gateway; the job trains to
`succeeded`. Every episode made three gateway calls, recorded and trained as one sequence (its trained tokens are the
three calls' sampled tokens, each with its recorded logprob), and its reward is verifiers' scoring of that
conversation (0.1 a turn, +0.5 when a reply holds the row's answer). The test kills the episodes' jails
mid-episode: each is retried from a clean start (a job event says so) and trains only its retry's calls. The same
env served by verifiers' own EnvServer (ZMQ) at `url` trains the same way through the gateway's keyed base URL, and a
server killed mid-episode and restarted has its episodes retried. A verifiers environment the jail cannot run (tools
as MCP Toolset servers; the user-sim env), a `url` that is not tcp://host:port, or one the egress policy refuses is a
422 at submit naming why."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from package_cache import CACHE, built
from runtime_platform import Platform, base_spec
from token_fidelity import fidelity, model_dir
from transformers import AutoTokenizer
from waiting import api_in_thread, free_port

from contract.egress import own_addresses
from contract.gateway import attempt_of, episode_id_of, recorded_calls
from contract.settings import get_settings
from contract.states import JobStatus
from contract.verifiers import VERIFIERS_REQUIREMENT
from workers.rewards.jail import missing_piece

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")]
ROOT = Path(__file__).resolve().parents[2]
TURNS = 3
EPISODES = 2  # prompts_per_iteration 1 x group_size 2
ENVIRONMENT = '''
import verifiers.v1 as vf
from verifiers.v1.envs.single_agent.env import SingleAgentEnvConfig


class ArithmeticData(vf.TaskData):
    answer: str = ""


class ArithmeticTask(vf.Task[ArithmeticData]):
    @vf.reward
    async def checked(self, trace) -> float:
        replies = [str(m.content) for m in trace.branches[-1].messages if m.role == "assistant"]
        return 0.1 * len(replies) + 0.5 * any(self.data.answer in reply for reply in replies)


class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):
    def load(self):
        yield ArithmeticTask(ArithmeticData(prompt="1+1=", answer="2"), self.config.task)


class CheckAgain(vf.Env[SingleAgentEnvConfig]):
    """Three turns: the policy answers, is asked to check its answer, answers again (twice)."""

    async def run(self, task, agents):
        async with agents.agent.interaction(task) as play:
            await play.turn()
            for _ in range(2):
                await play.turn("Check your answer and give it again.")


__all__ = ["ArithmeticTaskset", "CheckAgain"]
'''


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("verifiers") / "chat", seed=0)
    built(VERIFIERS_REQUIREMENT)  # the workers' package cache (tests/package_cache.py): the jail's verifiers
    # the served env's test server listens on loopback, which the operator's egress allow-list must name (in the
    # workers, and in this process for the submit check)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STREAMRL_EGRESS_ALLOW", "127.0.0.1")
        get_settings.cache_clear()
        try:
            with api_in_thread(pg_backend.settings) as url, Platform.start(
                    pg_backend, redis_url, model_dir, generation_slots=2,
                    extra_env={"STREAMRL_PUBLIC_URL": url, "STREAMRL_AGENT_PACKAGES_DIR": str(CACHE),
                               "STREAMRL_EGRESS_ALLOW": "127.0.0.1"}) as running:
                yield running
        finally:
            patch.undo()
            get_settings.cache_clear()


def _agent_jails(platform: Platform) -> list[psutil.Process]:
    """This platform's live agent jails (the outer bwrap of each, hostname agent-jail; bwrap forks an inner one as
    the jail's pid 1), under its generation worker."""
    out = []
    for child in psutil.Process(platform.workers["generation"].pid).children(recursive=True):
        try:
            if child.name() == "bwrap" and "agent-jail" in child.cmdline() and child.parent().name() != "bwrap":
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


def _pausing(seconds: float) -> str:
    """ENVIRONMENT, pausing `seconds` after its first turn (a window for a test's kill, mid-episode)."""
    pausing = ENVIRONMENT.replace("import verifiers.v1 as vf", "import asyncio\nimport verifiers.v1 as vf").replace(
        "            await play.turn()\n            for _", "            await play.turn()\n"
        f"            await asyncio.sleep({seconds})  # a window for the test's kill, mid-episode\n            for _")
    assert pausing.count("asyncio.sleep") == 1
    return pausing


def _check_trained(platform: Platform, job_id: int, samples_expected: int) -> list[dict[str, Any]]:
    """Each sample trains exactly its last attempt's three recorded calls' sampled tokens (with their logprobs), and
    its reward is verifiers' scoring; returns the lost attempts' calls (recorded, never trained)."""
    everything = recorded_calls(platform.client, job_id, lost=True)
    final = recorded_calls(platform.client, job_id)
    lost = [c for c in everything if c not in final]
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in final:
        calls[attempt_of(call["episode"])[0]].append(call)
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        assert len(samples) == samples_expected, platform.events(job_id)
        for sample in samples:
            assert sample["reward_error"] is None, sample
            episode = calls[episode_id_of(job_id, sample["sample_id"])]
            assert len(episode) == TURNS, (sample["sample_id"], len(episode))  # verifiers' loop: three calls
            assert round(sample["reward"] - 0.1 * TURNS, 6) in (0.0, 0.5), sample["reward"]  # verifiers' scoring
            record = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers).json()
            trained = [record["behaviour"][i] for i, m in enumerate(record["loss_mask"]) if m]
            sampled = [lp for call in episode for lp in call["choices"][0]["logprobs"]]
            assert trained == pytest.approx(sampled, abs=1e-4), sample["sample_id"]  # the (last) attempt's three
            assert all(lp < 0 for lp in trained)  # calls, one sequence: each a sampled token with its logprob
    return lost


def _submit_paused_turns(platform: Platform, source: dict[str, Any]) -> int:
    """A one-iteration job of the pausing env from `source` (its `code` or `url`), once each of its EPISODES episodes
    has made its first (recorded) call: the job's id."""
    spec = base_spec(environment={"type": "verifiers", **source, "max_turns": 4, "max_episode_tokens": 200,
                                  "episode_timeout_s": 120},
                     algorithm={"name": "grpo", "group_size": 2},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": 1, "prompts_per_iteration": 1, "micro_batch_size": 8, "lr": 1e-3})
    del spec["reward"]
    job_id = platform.submit_as(platform.team, platform.user, spec)
    deadline = time.monotonic() + 240
    while len({c["episode"] for c in recorded_calls(platform.client, job_id, lost=True)}) < EPISODES:
        assert time.monotonic() < deadline, (platform.events(job_id)[-10:], platform.logs_tail())
        time.sleep(0.05)
    return job_id


def test_a_multi_turn_verifiers_environment_trains_through_the_gateway(platform: Platform) -> None:
    """The env pauses after its first turn; once every episode has made that call, the test kills their jails
    (mid-episode): each is retried from a clean start (a job event), and each sample trains exactly its retry's three
    calls, never the dead attempt's."""
    job_id = _submit_paused_turns(platform, {"code": _pausing(3)})
    killed = _agent_jails(platform)
    for jail in killed:
        jail.kill()
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())
    retried = [e for e in platform.events(job_id) if "its agent was lost" in e]
    assert 1 <= len(retried) <= len(killed), (len(killed), retried)  # a jail past its reply is not lost
    assert all("retried from a clean start" in e and "(retry 1 of 3)" in e for e in retried), retried

    lost = _check_trained(platform, job_id, EPISODES)
    assert len({c["episode"] for c in lost}) == len(retried), lost  # each lost attempt's calls, none trained
    assert all(attempt_of(c["episode"])[1] == 0 for c in lost)
    figures = fidelity(platform, job_id, AutoTokenizer.from_pretrained(model_dir(platform)))  # retries' calls too
    print(figures.line())
    figures.assert_complete()
    print(f"verifiers samples {EPISODES}: {TURNS} gateway calls each, trained as one sequence; {len(killed)} "
          f"jails killed mid-episode, {len(retried)} episodes retried, {len(lost)} lost calls untrained")


@pytest.mark.parametrize(("environment", "words"), [
    ({"code": ENVIRONMENT.replace("class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):",
                                  "class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):\n"
                                  "    @classmethod\n    def toolsets(cls, config):\n        return [object()]\n")},
     "MCP Toolset servers that verifiers launches as processes"),
    ({"params": {"taskset": "reverse-text", "env": "user-sim"}}, "params.env 'user-sim' cannot train through"),
    ({"code": ENVIRONMENT.replace('__all__ = ["ArithmeticTaskset", "CheckAgain"]', "")}, "via `__all__`"),
    ({"url": "tcp://envs.example.com:5000", "params": {"taskset": "reverse-text"}}, "takes no `code` and no params"),
    ({"url": "http://envs.example.com:5000"}, "must be a tcp://host:port address"),
    ({"url": "tcp://envs.example.com"}, "needs its port"),
])
def test_verifiers_environments_the_jail_cannot_run_are_422s(platform: Platform, environment: dict[str, Any],
                                                              words: str) -> None:
    spec = base_spec(environment={"type": "verifiers", **environment})
    del spec["reward"]
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        response = api.post("/api/v1/jobs", json=spec, headers=headers)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][:2] == ["body", "environment"] and words in detail["msg"], detail


SERVER = """
import asyncio, sys
from workers.environments.verifiers_driver import HARNESS_ID, _harness_module
sys.modules[HARNESS_ID] = _harness_module()  # a tool-less chat loop in the server's process (any harness would do)
from verifiers.v1.serve.server import EnvServer
from verifiers.v1.utils.loaders import resolve_env_config

config = resolve_env_config({"id": "served_arith", "taskset": {"id": "served_arith"},
                             "agent": {"harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}})
server = EnvServer(config=config, address=sys.argv[1])
print("serving", server.address, flush=True)
asyncio.run(server.run())
"""


class ServedEnv:
    """verifiers' own EnvServer (verifiers.v1.serve, ZMQ) serving ENVIRONMENT in a subprocess on a fixed port."""

    def __init__(self, directory: Path, code: str):
        (directory / "served_arith.py").write_text(code)
        (directory / "serve.py").write_text(SERVER)
        self.directory, self.port = directory, free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": f"{self.directory}{os.pathsep}{ROOT}"}
        env.pop("STREAMRL_GATEWAY_KEY_IN_PATH", None)
        with (self.directory / "server.log").open("a") as log:
            self.process = subprocess.Popen([sys.executable, str(self.directory / "serve.py"), self.url],
                                            cwd=self.directory, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # its one line, once it is bound
        assert line.startswith("serving"), (self.directory / "server.log").read_text()[-2000:]

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)


def test_a_served_verifiers_env_at_a_url_trains_and_a_dead_server_has_its_episodes_retried(
        platform: Platform, tmp_path: Path) -> None:
    """verifiers' own EnvServer serves the env at a tcp:// URL; the worker is its EnvClient and sends each episode
    with its gateway base URL (the episode's token in the path). Each sample trains exactly its three recorded calls'
    sampled tokens. The env pauses after its first turn; once both episodes made that call, the test kills the server
    and starts it again on the same port: both episodes are retried (their retries train), and the job succeeds."""
    served = ServedEnv(tmp_path, _pausing(2))
    served.start()
    try:
        job_id = _submit_paused_turns(platform, {"url": served.url})
        served.kill()  # mid-episode: both paused after their first call
        served.start()
        job = platform.wait_done(job_id, timeout_s=300)
    finally:
        if served.process is not None and served.process.poll() is None:
            served.kill()
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())
    retried = [e for e in platform.events(job_id) if "verifiers env server" in e and "retried from a clean start" in e]
    assert len(retried) == EPISODES, platform.events(job_id)
    lost = _check_trained(platform, job_id, EPISODES)
    assert {attempt_of(c["episode"])[1] for c in lost} == {0} and len({c["episode"] for c in lost}) == EPISODES, lost
    print(f"served verifiers: {EPISODES} samples of {TURNS} gateway calls each trained exactly; the server "
          f"killed mid-episode, {len(retried)} episodes retried, {len(lost)} lost calls untrained")


def test_a_served_verifiers_env_url_the_egress_policy_refuses_is_a_422(platform: Platform) -> None:
    """The platform's own addresses (here Redis's port on this host's own non-loopback address) and cloud metadata
    are refused at submit, at `environment.url`, even with loopback allowed."""
    own = sorted(str(ip) for ip in own_addresses() if ip.version == 4 and not ip.is_loopback)
    urls = ["tcp://169.254.169.254:80"] + [f"tcp://{own[0]}:6379"] * bool(own)
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        for url in urls:
            spec = base_spec(environment={"type": "verifiers", "url": url})
            del spec["reward"]
            response = api.post("/api/v1/jobs", json=spec, headers=headers)
            assert response.status_code == 422, response.text
            detail = response.json()["detail"][0]
            assert detail["loc"] == ["body", "environment", "url"] and "is refused" in detail["msg"], detail
