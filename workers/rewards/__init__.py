"""Rewards: built-ins by name, weighted composites, and user Python code in a sandbox worker process.

See docs/architecture.md#stable-interfaces.
"""

from contract.rewards.validate import validate_reward_spec
from workers.rewards.base import Reward, RewardFn, RewardOutcome
from workers.rewards.factory import build_reward
from workers.rewards.jail import SandboxUnavailable

__all__ = ["Reward", "RewardFn", "RewardOutcome", "SandboxUnavailable", "build_reward", "validate_reward_spec"]
