"""RL training: algorithms (GRPO, PPO, RLOO, REINFORCE++), the `Trainer`, checkpoints and the SFT warm start.

Import submodules directly (`workers.training.trainer`, `workers.training.sft`); this package imports nothing.
"""
