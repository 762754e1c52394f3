"""Environments of multi-turn episodes (docs/user-guide.md#environments-and-tools): `build_environment(spec)` gives
the job's `Environment`, a built-in in-process (contract/environments.py), user code in the kernel jail (base.py) or an
OpenEnv server (openenv_env.py). The episode loop that drives them is workers/core/episode.py."""

from workers.environments.base import Environment, EnvironmentFailure, EnvironmentLost
from workers.environments.factory import build_environment

__all__ = ["Environment", "EnvironmentFailure", "EnvironmentLost", "build_environment"]
