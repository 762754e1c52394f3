"""Reward rules both sides apply: the built-in rewards (pure text functions) and `validate_reward_spec`, the check the
API runs at submit and the runtime runs when it builds a reward (workers/rewards/factory.py)."""

from contract.rewards import (
    graders,  # noqa: F401 - registers the OpenAI-style graders in REWARDS
    model_graders,  # noqa: F401 - registers `model` and `judge` in REWARDS
)
from contract.rewards.validate import validate_reward_spec

__all__ = ["validate_reward_spec"]
