"""`environment.type: verifiers` on the real platform (Celery workers, Postgres, Redis, the API on uvicorn): a
multi-turn environment written with verifiers' own API (0.4, `verifiers.v1`: a `Taskset` of tasks scored by a
`@vf.reward`, and an `Env` whose `run` plays three turns through `interaction(...).turn`) runs per episode in the
agent jail, verifiers' own loop calling the policy through the episode's rollout gateway; the job trains to
`succeeded`. Every episode made three gateway calls, recorded and trained as one sequence (its trained tokens are the
three calls' sampled tokens, each with its recorded logprob), and its reward is verifiers' scoring of that
conversation (0.1 a turn, +0.5 when a reply holds the row's answer). The test kills the episodes' jails
mid-episode: each is retried from a clean start (a job event says so) and trains only its retry's calls. A
verifiers environment the jail cannot run (tools as MCP Toolset servers; the user-sim env; a served env at a `url`)
is a 422 at submit naming why."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from package_cache import CACHE, built
from runtime_platform import Platform, base_spec
from waiting import api_in_thread

from contract.gateway import attempt_of, episode_id_of, recorded_calls
from contract.states import JobStatus
from contract.verifiers import VERIFIERS_REQUIREMENT
from workers.rewards.jail import missing_piece

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")]
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
    with api_in_thread(pg_backend.settings) as url, Platform.start(
            pg_backend, redis_url, model_dir, generation_slots=2,
            extra_env={"STREAMRL_PUBLIC_URL": url, "STREAMRL_AGENT_PACKAGES_DIR": str(CACHE)}) as running:
        yield running


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


def test_a_multi_turn_verifiers_environment_trains_through_the_gateway(platform: Platform) -> None:
    """The env pauses after its first turn; once every episode has made that call, the test kills their jails
    (mid-episode): each is retried from a clean start (a job event), and each sample trains exactly its retry's three
    calls, never the dead attempt's."""
    pausing = ENVIRONMENT.replace("import verifiers.v1 as vf", "import asyncio\nimport verifiers.v1 as vf").replace(
        "            await play.turn()\n            for _", "            await play.turn()\n"
        "            await asyncio.sleep(3)  # a window for the test's kill, mid-episode\n            for _")
    assert pausing.count("asyncio.sleep") == 1
    spec = base_spec(environment={"type": "verifiers", "code": pausing, "max_turns": 4,
                                  "max_episode_tokens": 200, "episode_timeout_s": 120},
                     algorithm={"name": "grpo", "group_size": 2},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": 1, "prompts_per_iteration": 1, "micro_batch_size": 8, "lr": 1e-3})
    del spec["reward"]
    job_id = platform.submit_as(platform.team, platform.user, spec)
    deadline = time.monotonic() + 240
    while len({c["episode"] for c in recorded_calls(platform.client, job_id, lost=True)}) < EPISODES:
        assert time.monotonic() < deadline, (platform.events(job_id)[-10:], platform.logs_tail())
        time.sleep(0.05)
    killed = _agent_jails(platform)
    for jail in killed:
        jail.kill()
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())
    retried = [e for e in platform.events(job_id) if "its agent's jail was lost" in e]
    assert 1 <= len(retried) <= len(killed), (len(killed), retried)  # a jail past its reply is not lost
    assert all("retried from a clean start" in e and "(retry 1 of 3)" in e for e in retried), retried

    everything = recorded_calls(platform.client, job_id, lost=True)
    final = recorded_calls(platform.client, job_id)
    lost = [c for c in everything if c not in final]
    assert len({c["episode"] for c in lost}) == len(retried), lost  # each lost attempt's calls, none trained
    assert all(attempt_of(c["episode"])[1] == 0 for c in lost)
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in final:
        calls[attempt_of(call["episode"])[0]].append(call)
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        assert len(samples) == EPISODES, platform.events(job_id)
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
    print(f"verifiers samples {len(samples)}: {TURNS} gateway calls each, trained as one sequence; {len(killed)} "
          f"jails killed mid-episode, {len(retried)} episodes retried, {len(lost)} lost calls untrained")


@pytest.mark.parametrize(("environment", "words"), [
    ({"code": ENVIRONMENT.replace("class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):",
                                  "class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):\n"
                                  "    @classmethod\n    def toolsets(cls, config):\n        return [object()]\n")},
     "MCP Toolset servers that verifiers launches as processes"),
    ({"params": {"taskset": "reverse-text", "env": "user-sim"}}, "params.env 'user-sim' cannot train through"),
    ({"code": ENVIRONMENT.replace('__all__ = ["ArithmeticTaskset", "CheckAgain"]', "")}, "via `__all__`"),
    ({"url": "tcp://envs.example.com:5000", "params": {"taskset": "reverse-text"}}, "ClientConfig.api_key_var"),
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
