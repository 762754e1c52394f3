"""Rewards: built-ins by name, weighted composites, and user Python code in a sandbox worker process.

See docs/architecture.md#stable-interfaces.
"""

from workers.rewards.base import Reward, RewardFn, RewardOutcome
from workers.rewards.factory import build_reward

__all__ = ["Reward", "RewardFn", "RewardOutcome", "build_reward"]
