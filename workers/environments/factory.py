"""`build_environment(spec)`: the job's `Environment` by `environment.type`: user code in the jail (python), an
OpenEnv server (openenv: at its URL, or served from `code` in the jail), or a built-in in process."""

from __future__ import annotations

from contract.environments import OPENENV, PYTHON, bind_builtin
from contract.settings import get_settings
from contract.spec import EnvironmentSpec
from workers.agents.runner import packages_dir
from workers.environments.base import Environment, InProcessEnvironment, SandboxedEnvironment
from workers.environments.openenv_env import OpenEnvEnvironment
from workers.environments.openenv_jail import JailedServer
from workers.rewards.jail import SandboxUnavailable, missing_piece

OPENENV_SERVER_MEMORY_MB = 2048  # a jailed OpenEnv server's address space unless environment.memory_mb says otherwise


def build_environment(spec: EnvironmentSpec, *, mode: str | None = None) -> Environment:
    """The job's environment. Raises ValueError for bad params and SandboxUnavailable (workers/rewards/jail.py)
    where user code may not run here."""
    if spec.type == PYTHON:
        assert spec.code is not None  # EnvironmentSpec's validator guarantees it
        return SandboxedEnvironment(spec.code, timeout_s=spec.step_timeout_s, memory_mb=spec.memory_mb, mode=mode)
    if spec.type == OPENENV:
        if spec.code is not None:  # served in the jail (EnvironmentSpec's validator: code or url, one of them)
            missing = missing_piece()
            if missing is not None:  # a host that cannot build the jail does not take the job (HostMissing)
                raise SandboxUnavailable(f"an OpenEnv server from `code` runs only in the jail: {missing}")
            memory_mb = spec.memory_mb if "memory_mb" in spec.model_fields_set else OPENENV_SERVER_MEMORY_MB
            server = JailedServer(spec.code, spec.requirements, memory_mb=memory_mb,
                                  cache_dir=packages_dir(get_settings()))
            return OpenEnvEnvironment(None, step_timeout_s=spec.step_timeout_s, server=server, **spec.params)
        return OpenEnvEnvironment(spec.url, step_timeout_s=spec.step_timeout_s, **spec.params)
    return InProcessEnvironment(spec.type, bind_builtin(spec.type, spec.params))
