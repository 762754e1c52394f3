"""The agent of an `environment.type: verifiers` episode: verifiers' own episode loop, run in the agent jail
(workers/agents/agent_child.py execs this file's text as the episode's agent code, with `JOB` appended by
workers/environments/verifiers_gateway.py). Only the jail imports it; it needs `verifiers` (0.4, `verifiers.v1`),
installed with the environment's requirements.

`run(task, base_url, api_key)`: loads the job's verifiers environment (the user's module from `environment.code`,
else the installed taskset `params.taskset`, paired with `params.env` when given), picks the task the dataset row
names (`task`: its index in the taskset), and runs `Env.run_episode` with its model client at the episode's gateway
(`base_url`, the episode token as the key). Every role plays on `InProcessChat`, a tool-less chat loop in this
process (verifiers' `null` harness launches a program in a runtime; the jail has no processes), each segment one
chat call through verifiers' interception server (loopback in the jail) to the gateway, which samples and records
it. The reward is verifiers' own scoring of the trainable trace (`trace.reward`, its `@vf.reward`s weighted).

Refused, naming why (the episode fails, never the job): roles pinned to a harness that runs a program (bash, codex,
...), toolsets (MCP servers verifiers launches as processes), judges (a model other than the policy), a role the env
marks untrainable (a simulated user: the gateway trains every call of an episode), more than one trainable run per
episode (the gateway trains one conversation).
"""

import asyncio
import json
import os
import sys
import types

JOB: dict = {}  # appended by the host: {"code", "taskset", "env", "config"} (verifiers_gateway.py agent_code)
USER_MODULE = "streamrl_verifiers_env"  # the user's `code`, importable under this taskset id
HARNESS_ID = "streamrl_inprocess_chat"
IN_PROCESS = ("null",)  # verifiers harnesses whose chat loop InProcessChat plays (tool-less, one call a segment)
KEY_VAR = "STREAMRL_EPISODE_KEY"


class Unsupported(RuntimeError):
    """What this verifiers environment needs that the jail cannot give."""


def _harness_module() -> types.ModuleType:
    from openai import AsyncOpenAI
    from verifiers.v1.configs.harness import HarnessConfig
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.harness import Harness
    from verifiers.v1.runtimes import ProgramResult

    class InProcessChatConfig(HarnessConfig):
        pass

    class InProcessChat(Harness[InProcessChatConfig]):
        """verifiers' `null` chat loop without the program: one chat call per segment, from this process."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_RESUME = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data,
                         tool_interception_url=None):
            system, prompt = self.resolve_prompt(data)
            messages = [{"role": "system", "content": system}] if system else []
            if isinstance(prompt, str):
                messages.append({"role": "user", "content": prompt})
            elif prompt:
                messages += [message_to_wire(m) for m in prompt]
            client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
            try:
                await client.chat.completions.create(model=ctx.model, messages=messages)  # type: ignore[arg-type]
            finally:
                await client.close()
            return ProgramResult(exit_code=0, stdout="", stderr="")

    module = types.ModuleType(HARNESS_ID)
    module.InProcessChat, module.InProcessChatConfig = InProcessChat, InProcessChatConfig  # type: ignore[attr-defined]
    module.__all__ = ["InProcessChat"]  # type: ignore[attr-defined]
    return module


def _install_modules() -> None:
    sys.modules[HARNESS_ID] = _harness_module()
    if JOB.get("code"):
        module = types.ModuleType(USER_MODULE)
        module.__file__ = f"<{USER_MODULE}>"
        sys.modules[USER_MODULE] = module  # before exec: pydantic resolves the module's annotations through it
        exec(compile(JOB["code"], "<environment>", "exec"), module.__dict__)


def _config():
    """The env config with every role on InProcessChat in a local runtime (Unsupported: a role's harness runs a
    program)."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.utils.loaders import resolve_env_config

    data = {**(JOB.get("config") or {}), "taskset": {**((JOB.get("config") or {}).get("taskset") or {}),
                                                     "id": JOB.get("taskset") or USER_MODULE}}
    if JOB.get("env"):
        data["id"] = JOB["env"]
    config = resolve_env_config(data)
    pinned = {name: spec.harness for name, spec in agent_config_fields(config).items()}
    defaults = config.agent_harnesses()
    raw = config.model_dump()
    for name in agent_config_fields(config):
        harness = (pinned[name] or defaults[name]).id
        if pinned[name] is not None and harness not in IN_PROCESS or pinned[name] is None and harness != "bash":
            raise Unsupported(f"role {name!r} plays on verifiers harness {harness!r}, which runs a program in a "
                              "verifiers runtime (a process, container or sandbox): the jail runs no processes; "
                              "only the tool-less chat loop (harness 'null', or none) runs here")
        raw[name] = {**raw[name], "harness": {"id": HARNESS_ID}, "runtime": {"type": "subprocess"}}
    return resolve_env_config(raw)


def _check_task(env, task) -> None:
    reasons = []
    if type(env.taskset).toolsets(env.taskset.config) or type(task).toolsets(task.config):
        reasons.append("its tools are MCP Toolset servers that verifiers launches as processes")
    if task.plugged_judges():
        reasons.append("its judges call a model other than the policy")
    if reasons:
        raise Unsupported(f"verifiers task {task.data.idx} ({type(task).__name__}): " + "; ".join(reasons))


def _refuse_untrainable(env) -> None:
    setup = env.setup

    async def checked(agents) -> None:
        await setup(agents)
        frozen = sorted(name for name, agent in agents._agents.items() if not agent.trainable)
        if frozen:
            raise Unsupported(f"roles {frozen} are not trainable (e.g. a simulated user), but every model call of "
                              "an episode goes through the gateway and is trained")

    env.setup = checked


def _failure(episode) -> str:
    errors = [*episode.errors, *(error for trace in episode.traces for error in trace.errors)]
    if errors:
        error = errors[0]
        return f"{getattr(error, 'type', 'Error')}: {getattr(error, 'message', error)}"[:900]
    return "the verifiers episode did not complete"


def _task(env, row: dict):
    """The row's task: the taskset's task at the row's `task` index (an int: rows from verifiers_rows), else one of
    the taskset's task type built from the row's fields (its `prompt`, `answer`, ... as the task data's fields)."""
    tasks = list(env.taskset)
    if not tasks:
        raise ValueError("the verifiers taskset has no tasks")
    index = row.get("task")
    if isinstance(index, bool) or not isinstance(index, int):
        data_type = type(tasks[0].data)
        data = data_type.model_validate({k: v for k, v in row.items() if k in data_type.model_fields})
        return type(tasks[0])(data, env.taskset.config.task)
    if not 0 <= index < len(tasks):
        raise ValueError(f"the dataset row's 'task' {index} is no index of the taskset's {len(tasks)} tasks")
    return tasks[index]


async def _episode(row: dict, base_url: str):
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.utils.loaders import load_environment

    env = load_environment(_config())
    task = _task(env, row)
    _check_task(env, task)
    _refuse_untrainable(env)
    context = ModelContext(model="policy", client=EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR))
    async with env.serving():
        return await env.run_episode(task, context)


async def run(task: dict, base_url: str, api_key: str) -> float | None:
    os.environ[KEY_VAR] = api_key
    os.environ.setdefault("HOME", os.getcwd())  # verifiers keeps its cache under ~/.cache (the jail's scratch)
    _install_modules()
    episode = await _episode(task, base_url)
    if not episode.ok:
        raise RuntimeError(_failure(episode))
    return trained_reward(episode)


def trained_reward(episode, unsupported: type[Exception] = Unsupported,
                   failed: type[Exception] = RuntimeError) -> float | None:
    """verifiers' score of the episode's one trainable run (the gateway trains one conversation per episode); raises
    `unsupported` for any other number of trainable runs, `failed` for a reward its scoring left unset."""
    trained = [trace for trace in episode.traces if trace.agent.trainable]
    if len(trained) != 1:
        raise unsupported(f"the episode ran {len(trained)} trainable agent runs; the gateway trains one "
                          "conversation per episode")
    (trace,) = trained
    unscored = [name for name, reward in trace.rewards.items() if reward is None]
    if unscored:
        raise failed(f"verifiers scoring left rewards {unscored} unscored")
    return float(trace.reward) if trace.rewards else None


if __name__ == "__main__":  # a local check outside the jail: JOB and the row as JSON arguments
    JOB.update(json.loads(sys.argv[1]))
    print(asyncio.run(run(json.loads(sys.argv[2]), sys.argv[3], sys.argv[4])))
