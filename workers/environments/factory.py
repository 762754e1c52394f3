"""`build_environment(spec)`: the job's `Environment` by `environment.type`: user code in the jail (python), an
OpenEnv server (openenv), or a built-in in process."""

from __future__ import annotations

from contract.environments import OPENENV, PYTHON, bind_builtin
from contract.spec import EnvironmentSpec
from workers.environments.base import Environment, InProcessEnvironment, SandboxedEnvironment
from workers.environments.openenv_env import OpenEnvEnvironment


def build_environment(spec: EnvironmentSpec, *, mode: str | None = None) -> Environment:
    """The job's environment. Raises ValueError for bad params and SandboxUnavailable (workers/rewards/jail.py)
    where user code may not run here."""
    if spec.type == PYTHON:
        assert spec.code is not None  # EnvironmentSpec's validator guarantees it
        return SandboxedEnvironment(spec.code, timeout_s=spec.step_timeout_s, memory_mb=spec.memory_mb, mode=mode)
    if spec.type == OPENENV:
        assert spec.url is not None  # EnvironmentSpec's validator guarantees it
        return OpenEnvEnvironment(spec.url, step_timeout_s=spec.step_timeout_s, **spec.params)
    return InProcessEnvironment(spec.type, bind_builtin(spec.type, spec.params))
