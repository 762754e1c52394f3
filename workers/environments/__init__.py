"""Environments of multi-turn episodes (docs/user-guide.md#environments-and-tools): `build_environment(spec)` gives
the job's `Environment`, a built-in in-process (contract/environments.py) or user code in the kernel jail
(sandboxed.py). The episode loop that drives them is workers/core/episode.py."""

from workers.environments.base import Environment, EnvironmentFailure, build_environment

__all__ = ["Environment", "EnvironmentFailure", "build_environment"]
