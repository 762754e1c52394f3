"""`environment.type: verifiers` on the real platform (Celery workers, Postgres, Redis, the API on uvicorn): a
multi-turn environment written with verifiers' own API (0.4, `verifiers.v1`: a `Taskset` of tasks scored by a
`@vf.reward`, and an `Env` whose `run` plays three turns through `interaction(...).turn`) runs per episode in the
agent jail, verifiers' own loop calling the policy through the episode's rollout gateway; the job trains to
`succeeded`. Every episode made three gateway calls, recorded and trained as one sequence (its trained tokens are the
three calls' sampled tokens, each with its recorded logprob), and its reward is verifiers' scoring of that
conversation (0.1 a turn, +0.5 when a reply holds the row's answer). A verifiers environment the jail cannot run
(tools as MCP Toolset servers; the user-sim env) is a 422 at submit naming why."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from package_cache import CACHE, built
from runtime_platform import Platform, base_spec
from waiting import api_in_thread

from contract.gateway import episode_id_of, recorded_calls
from contract.states import JobStatus
from contract.verifiers import VERIFIERS_REQUIREMENT
from workers.rewards.jail import missing_piece

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")]
TURNS = 3
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


def test_a_multi_turn_verifiers_environment_trains_through_the_gateway(platform: Platform) -> None:
    spec = base_spec(environment={"type": "verifiers", "code": ENVIRONMENT, "max_turns": 4,
                                  "max_episode_tokens": 200, "episode_timeout_s": 120},
                     algorithm={"name": "grpo", "group_size": 2},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": 1, "prompts_per_iteration": 2, "micro_batch_size": 8, "lr": 1e-3})
    del spec["reward"]
    job_id = platform.submit_as(platform.team, platform.user, spec)
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())

    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in recorded_calls(platform.client, job_id):
        calls[call["episode"]].append(call)
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        assert samples, platform.events(job_id)
        for sample in samples:
            assert sample["reward_error"] is None, sample
            episode = calls[episode_id_of(job_id, sample["sample_id"])]
            assert len(episode) == TURNS, (sample["sample_id"], len(episode))  # verifiers' loop: three calls
            assert round(sample["reward"] - 0.1 * TURNS, 6) in (0.0, 0.5), sample["reward"]  # verifiers' scoring
            record = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers).json()
            trained = [i for i, m in enumerate(record["loss_mask"]) if m]
            sampled = [len(call["choices"][0]["ids"]) for call in episode]
            assert len(trained) == sum(sampled), (len(trained), sampled)  # all three calls, one sequence
            assert all(record["behaviour"][i] < 0 for i in trained)  # each a sampled token with its logprob
    print(f"verifiers samples {len(samples)}: {TURNS} gateway calls each, trained as one sequence")


@pytest.mark.parametrize(("environment", "words"), [
    ({"code": ENVIRONMENT.replace("class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):",
                                  "class ArithmeticTaskset(vf.Taskset[ArithmeticTask]):\n"
                                  "    @classmethod\n    def toolsets(cls, config):\n        return [object()]\n")},
     "MCP Toolset servers that verifiers launches as processes"),
    ({"params": {"taskset": "reverse-text", "env": "user-sim"}}, "params.env 'user-sim' cannot train through"),
    ({"code": ENVIRONMENT.replace('__all__ = ["ArithmeticTaskset", "CheckAgain"]', "")}, "via `__all__`"),
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
