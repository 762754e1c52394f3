"""`environment.type: verifiers` on a generation instance: the job's episodes are gateway episodes whose agent is
verifiers' own episode loop (workers/environments/verifiers_driver.py) run by the agent runner (workers/agents/
runner.py `JailedAgent`) in the agent jail (a jail runs up to `agent.episodes_per_jail` consecutive episodes, loading
verifiers once), its packages the environment's requirements with verifiers pinned (contract/verifiers.py
`verifiers_requirements`). The gateway samples and records every chat call; the reward is verifiers' scoring of the
episode, which the driver returns as `run`'s reward."""

from __future__ import annotations

import json
from pathlib import Path

from contract.agent import AgentSpec
from contract.spec_environment import EnvironmentSpec
from contract.verifiers import DEFAULT_CONCURRENCY, verifiers_requirements

DRIVER = Path(__file__).with_name("verifiers_driver.py")
EPISODE_MEMORY_MB = 4096  # the address space verifiers and its imports (numpy's BLAS buffers) need at least


def driver_code(spec: EnvironmentSpec) -> str:
    """The episode's agent code: the driver with the job's environment (`JOB`) bound as a JSON literal."""
    job = {"code": spec.code, "taskset": spec.params.get("taskset"), "env": spec.params.get("env"),
           "config": spec.params.get("config") or {}}
    return f"{DRIVER.read_text()}\nJOB.update(json.loads({json.dumps(job)!r}))\n"


def verifiers_agent(spec: EnvironmentSpec) -> AgentSpec:
    """The `agent.code` equivalent of a verifiers environment (built here, not validated as a user's agent: the
    code is the platform's driver, and may pass agent.code's length limit with the user's module inside)."""
    return AgentSpec.model_construct(
        code=driver_code(spec), url=None, requirements=verifiers_requirements(spec.requirements),
        concurrency=int(spec.params.get("concurrency", DEFAULT_CONCURRENCY)), timeout_s=spec.episode_timeout_s,
        memory_mb=max(spec.memory_mb, EPISODE_MEMORY_MB), retries=0)
