"""`EnvironmentSpec`: a job's multi-turn episodes (a built-in environment, Python code, an OpenEnv server, or an agent's
own calls through the rollout gateway); a part of `JobSpec` (contract/spec.py), which re-exports it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator, model_validator

from contract.agent import MAX_REQUIREMENTS, checked_requirements
from contract.catalog import ENVIRONMENTS, EnvironmentName
from contract.environments import GATEWAY, OPENENV, PYTHON, VERIFIERS, bind_builtin
from contract.openenv import code_error, openenv_error
from contract.spec_base import StrictModel, check_json_value, choice_list
from contract.spec_tasks import MAX_PARAMS_BYTES, RewardSpec
from contract.verifiers import verifiers_error


class EnvironmentSpec(StrictModel):
    """A multi-turn environment (docs/user-guide.md#environments-and-tools): a built-in by `type`, or `python` with
    `code` defining `reset(row) -> messages` and `step(messages, row) -> {"messages", "reward", "done"}` (and
    optionally `TOOLS`, JSON-schema tool definitions). Each episode is one sample: the policy's turns are trained,
    the environment's tokens are context only (loss mask 0)."""

    type: EnvironmentName = Field(..., description="built-in environment, 'python' for your own `code`, "
                                  "'openenv' for an OpenEnv server at `url`, 'gateway' for your agent, 'verifiers' "
                                  "for a verifiers environment (its own loop in the jail, through the gateway)",
                                  json_schema_extra=choice_list(ENVIRONMENTS))
    params: dict[str, Any] = Field(default_factory=dict, description="parameters of a built-in environment; type "
                                   "'verifiers': taskset, env (installed plugin ids), config (verifiers env config "
                                   "overrides), concurrency (episodes per instance at once, default 4)")
    code: str | None = Field(None, max_length=100_000, description="type 'python': your environment's code, run in "
                             "the kernel jail python rewards use; type 'openenv': Python defining `app` (the OpenEnv "
                             "server's ASGI app), served in the jail; type 'verifiers': a module exporting its "
                             "verifiers Taskset (and any Env) via `__all__`, run in the agent jail")
    url: str | None = Field(None, max_length=2000, description="type 'openenv': the OpenEnv environment server's "
                            "base URL (http or https; it must pass the operator's egress policy). Each episode is one "
                            "WebSocket session of it; episodes a dead server loses are retried. Type 'verifiers': "
                            "your verifiers env server's ZMQ address, tcp://host:port (verifiers.v1.serve EnvServer; "
                            "the egress policy too): each dataset row is sent as a task's data, its model calls go to "
                            "the episode's gateway")
    requirements: list[str] = Field(default_factory=list, max_length=MAX_REQUIREMENTS, description="type 'openenv' "
                                    "with `code`: the server's packages (e.g. 'openenv-core==0.3.0'), installed like "
                                    "agent.requirements and bound read-only into its jail; type 'verifiers': the "
                                    "environment's packages (verifiers==0.4.0 is added unless named)")
    max_turns: int = Field(4, ge=1, le=64, description="policy turns per episode at most")
    max_episode_tokens: int = Field(512, ge=8, le=131_072, description="tokens after the opening prompt (policy and "
                                    "environment together) per episode at most")
    step_timeout_s: float = Field(2.0, gt=0, le=60, description="wall-clock limit of one reset() or step() call of "
                                  "user code; past it the episode fails and the jailed process is restarted")
    episode_timeout_s: float = Field(600.0, gt=0, le=86_400, description="type 'gateway' or 'verifiers': wall-clock "
                                     "limit of one episode from its opening (waiting for an agent included); past "
                                     "it the episode fails")
    memory_mb: int = Field(256, ge=64, le=4096, description="address-space limit of the jailed process (python; "
                           "unset: 2048 for an openenv server; a verifiers episode's jail gets 4096)")
    grader: RewardSpec | None = Field(None, description="grades the episode's final assistant message as `reward` "
                                      "grades a completion (any reward or grader type: string_check, judge, multi...);"
                                      " its score is added to the environment's step rewards. None: the steps' alone")

    @field_validator("params")
    @classmethod
    def _params_json(cls, params: dict[str, Any]) -> dict[str, Any]:
        check_json_value(params, "params")
        if len(json.dumps(params).encode()) > MAX_PARAMS_BYTES:
            raise ValueError(f"params is over {MAX_PARAMS_BYTES} bytes as JSON")
        return params

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, requirements: list[str]) -> list[str]:
        return checked_requirements(requirements)

    @model_validator(mode="after")
    def _consistent(self) -> EnvironmentSpec:
        if self.type == OPENENV:
            why = openenv_error(self.url, self.code, self.requirements, self.params)
            if why is not None:
                raise ValueError(why)
            return self
        if self.type == VERIFIERS:
            why = verifiers_error(self.url, self.code, self.params)
            if why is None and self.url is not None and self.requirements:
                why = "`requirements` are not used with a served verifiers env (`url`): its server has its packages"
            if why is not None:
                raise ValueError(why)
            return self
        if self.requirements:
            raise ValueError("`requirements` are only used with type 'openenv' (with `code`) or 'verifiers'")
        if self.type == PYTHON:
            if not self.code:
                raise ValueError("type 'python' needs `code` defining reset(row) and step(messages, row)")
            if self.params:
                raise ValueError("`params` are for built-in environments; python code reads its own constants")
            why = code_error(self.code, "environment")
            if why is not None:
                raise ValueError(why)
            return self
        if self.code:
            raise ValueError("`code` is only used with type 'python', 'openenv' or 'verifiers'")
        if self.url is not None:
            raise ValueError("`url` is only used with type 'openenv' or 'verifiers'")
        if self.type == GATEWAY:
            if self.params:
                raise ValueError("type 'gateway' takes no `params`: the agent drives its episodes")
            return self
        bind_builtin(self.type, self.params)  # ValueError names the bad param
        return self
