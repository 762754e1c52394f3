"""Environments written for `verifiers` (0.4, `verifiers.v1`): a taskset's tasks open the episodes and their own
`@vf.reward` functions score them (workers/environments/verifiers_env.py); tasks that need what only a verifiers
rollout has (MCP tool servers, model judges, a runtime box) are refused naming why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers.v1")

import verifiers.v1 as vf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from contract.sample import PromptRequest  # noqa: E402
from contract.spec import EnvironmentSpec, GenerationSpec  # noqa: E402
from workers.core.episode import EpisodeRunner, run_episodes  # noqa: E402
from workers.core.rollout import sampling_params  # noqa: E402
from workers.environments import EnvironmentFailure  # noqa: E402
from workers.environments.verifiers_env import VerifiersEnvironment, verifiers_rows  # noqa: E402
from workers.generation.engines import setup_engine  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402


class SumData(vf.TaskData):
    answer: str = ""


class SumTask(vf.Task[SumData, vf.State]):
    @vf.reward
    async def correct(self, task: SumData, trace: Any) -> float:
        return 1.0 if trace.last_reply == task.answer else 0.0

    @vf.reward(weight=0.5)
    async def brief(self, trace: Any) -> float:
        return 1.0 if len(trace.last_reply) <= 3 else 0.0


class SumTaskset(vf.Taskset[SumTask]):
    def load(self) -> Any:
        for a in range(4):
            yield SumTask(SumData(prompt=f"What is {a} + 1?", answer=str(a + 1), system_prompt="Answer briefly."))


class FailingTask(SumTask):
    @vf.reward
    async def correct(self, task: SumData, trace: Any) -> float:
        raise ZeroDivisionError("bad grader")


class ToolTask(SumTask):
    @classmethod
    def toolsets(cls, config: Any) -> list[Any]:
        return [object()]  # any toolset: verifiers would launch it as an MCP server per rollout


class BoxTask(SumTask):
    @vf.reward
    async def in_box(self, trace: Any, runtime: Any) -> float:
        return 1.0


def _taskset(task_type: type[SumTask]) -> Any:
    class Tasks(vf.Taskset[task_type]):  # a taskset of one task of this type
        def load(self) -> Any:
            yield task_type(SumData(prompt="What is 1 + 1?", answer="2"))

    return Tasks(vf.TasksetConfig())


def test_a_task_opens_the_episode_and_its_rewards_score_the_reply() -> None:
    taskset = SumTaskset(vf.TasksetConfig())
    env = VerifiersEnvironment(taskset)
    rows = verifiers_rows(taskset)
    assert [r["task"] for r in rows] == [0, 1, 2, 3] and rows[2]["prompt"] == "What is 2 + 1?"
    assert len({r["prompt_id"] for r in rows}) == 4
    opening = env.reset(rows[2])
    assert opening == [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 1?"}]
    assert env.step([*opening, {"role": "assistant", "content": "3"}], rows[2]) == ([], 1.5, True)
    assert env.step([*opening, {"role": "assistant", "content": "four"}], rows[2]) == ([], 0.0, True)
    assert env.step([*opening, {"role": "assistant", "content": "4"}], rows[2]) == ([], 0.5, True)
    with pytest.raises(EnvironmentFailure, match="no 'task' index"):
        env.reset({"prompt": "x", "prompt_id": "x"})


def test_a_failing_reward_fails_the_episode_naming_it() -> None:
    env = VerifiersEnvironment(_taskset(FailingTask))
    row = {"prompt": "What is 1 + 1?", "prompt_id": "0", "task": 0}
    with pytest.raises(EnvironmentFailure, match="verifiers scoring: .*ZeroDivisionError: bad grader"):
        env.step([*env.reset(row), {"role": "assistant", "content": "2"}], row)


@pytest.mark.parametrize(("task_type", "why"), [(ToolTask, "MCP Toolset servers"),
                                                (BoxTask, r"rewards \['in_box'\] need a verifiers runtime")])
def test_tasks_needing_a_verifiers_rollout_are_refused_naming_why(task_type: type[SumTask], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        VerifiersEnvironment(_taskset(task_type))


def test_verifiers_episodes_run_in_the_episode_loop(tmp_path: Path) -> None:
    model = build_tiny_model("chat-qwen2-1m", tmp_path / "model")
    taskset = SumTaskset(vf.TasksetConfig())
    env = VerifiersEnvironment(taskset)
    generation = GenerationSpec(max_tokens=6)
    runner = EpisodeRunner(env, AutoTokenizer.from_pretrained(model), EnvironmentSpec(type="calculator"),
                           sampling_params(generation))
    requests = [PromptRequest(sample_id=f"0:{i}:0", group_id=f"0:{i}", prompt_id=row["prompt_id"], iteration=0,
                              prompt_ids=[0], prompt_text=row["prompt"], meta={k: v for k, v in row.items()
                                                                               if k != "prompt"}, seed=i)
                for i, row in enumerate(verifiers_rows(taskset))]
    engine = setup_engine("hf", model_dir=model, max_batch_size=4)
    samples = run_episodes(engine, runner, requests, job_id=1, instance_id="test")
    assert len(samples) == 4
    for sample in samples:
        assert sample.reward_error is None and sample.episode_end == "done" and sample.turns == 1
        assert sample.reward in (0.0, 0.5, 1.0, 1.5)
        assert "Answer briefly." in sample.prompt_text and "+ 1?" in sample.prompt_text
