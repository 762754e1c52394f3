"""Environments written for the `verifiers` package (>= 0.4, `verifiers.v1`) as StreamRL environments, where its API
allows it (docs/user-guide.md#environments-written-for-verifiers):

    taskset = MyTaskset(vf.TasksetConfig())                 # the verifiers environment's data + scoring half
    env = VerifiersEnvironment(taskset)                      # a workers.environments.Environment
    rows = verifiers_rows(taskset)                           # dataset rows: prompt, prompt_id (the task's key), task

A row's episode opens with its task's system prompt and prompt (`reset`); the policy's reply is scored by the task's
own `@vf.reward` functions and the episode ends (`step`): single-turn episodes, verifiers' rewards. verifiers 0.4
rolls out through a `Harness` that calls the model over an OpenAI-compatible client and reaches tools as MCP
`Toolset` servers launched per rollout, with judges that call models too; none of that fits an episode loop that owns
generation, so a taskset whose tasks need tools, judges or a runtime to score is refused here, naming which.

Scoring is verifiers' own (`Task.score` on an offline `Trace` of the conversation, no runtime); each step runs it to
completion with asyncio. verifiers is imported on first use (optional dependency: `pip install verifiers`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from typing import Any

from contract.environments import Message, StepResultError, check_reset
from workers.environments.base import MAX_ERROR_CHARS, Environment, EnvironmentFailure

ROW_TASK = "task"  # the row column holding the task's index in the taskset


def _requires_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def unsupported(task: Any) -> list[str]:
    """Why this verifiers task cannot run as a StreamRL environment (empty: it can)."""
    reasons = []
    if type(task).toolsets(task.config):
        reasons.append("its tools are MCP Toolset servers that verifiers launches per rollout")
    if task.plugged_judges():
        reasons.append("its judges call a model through a client")
    needing = [fn.__name__ for fn in task.hooks("reward") if _requires_runtime(fn)]
    if needing:
        reasons.append(f"its rewards {needing} need a verifiers runtime (a sandbox box)")
    if not task.hooks("reward"):
        reasons.append("it has no @vf.reward functions")
    return reasons


def verifiers_rows(taskset: Any) -> list[dict[str, Any]]:
    """Dataset rows for a taskset's tasks: `prompt` (its text), `prompt_id` (its key), `task` (its index)."""
    return [{"prompt": task.data.prompt_text, "prompt_id": task.key, ROW_TASK: index}
            for index, task in enumerate(taskset)]


class VerifiersEnvironment(Environment):
    """A verifiers taskset: reset opens with the task's messages, step scores the reply with its rewards (done)."""

    name = "verifiers"

    def __init__(self, taskset: Any):
        self.tasks = list(taskset)
        if not self.tasks:
            raise ValueError("the verifiers taskset has no tasks")
        for index, task in enumerate(self.tasks):
            reasons = unsupported(task)
            if reasons:
                raise ValueError(f"verifiers task {index} ({type(task).__name__}) cannot run here: "
                                 + "; ".join(reasons))

    def _task(self, row: Mapping[str, Any]) -> Any:
        index = row.get(ROW_TASK)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.tasks):
            raise EnvironmentFailure(f"row {row.get('prompt_id')!r} has no {ROW_TASK!r} index of the taskset's "
                                     f"{len(self.tasks)} tasks (rows from verifiers_rows)")
        return self.tasks[index]

    def reset(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        from verifiers.v1.types import content_text

        data = self._task(row).data
        opening: list[Message] = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        if isinstance(data.prompt, str):
            opening.append({"role": "user", "content": data.prompt})
        else:
            opening += [{"role": m.role, "content": content_text(m.content)} for m in data.prompt or []]
        try:
            return check_reset(opening)
        except StepResultError as exc:
            raise EnvironmentFailure(f"verifiers task prompt: {exc}"[:MAX_ERROR_CHARS]) from None

    def step(self, messages: list[Message], row: Mapping[str, Any],
             episode: str = "") -> tuple[list[Message], float | None, bool]:
        task = self._task(row)
        trace = _trace(task, messages)
        try:
            asyncio.run(task.score(trace))
        except Exception as exc:  # noqa: BLE001 - verifiers wraps the task's errors in TaskError; any fails the episode
            raise EnvironmentFailure(f"verifiers scoring: {exc}"[:MAX_ERROR_CHARS]) from None
        missing = [name for name, reward in trace.rewards.items() if reward is None]
        if missing:
            raise EnvironmentFailure(f"verifiers scoring left rewards {missing} unscored")
        return [], float(trace.reward), True


def _trace(task: Any, messages: list[Message]) -> Any:
    """An offline verifiers Trace of the conversation: one node per message, the assistant turns as sampled."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage, SystemMessage, ToolMessage, UserMessage

    nodes = []
    for index, message in enumerate(messages):
        role, content = message["role"], str(message.get("content", ""))
        if role == "assistant":
            typed: Any = AssistantMessage(content=content)
        elif role == "system":
            typed = SystemMessage(content=content)
        elif role == "tool":
            typed = ToolMessage(content=content, tool_call_id=str(message.get("tool_call_id", "")))
        else:
            typed = UserMessage(content=content)
        nodes.append(MessageNode(parent=index - 1 if index else None, message=typed, sampled=role == "assistant"))
    return Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                 agent=AgentInfo(config=AgentConfig()), nodes=nodes)
