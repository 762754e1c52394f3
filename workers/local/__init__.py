"""Single-process RL (`streamrl train-local`): the reusable verbs and the reference loop built from them."""

from workers.local.run import IterationRecord, LocalRunResult, train_local

__all__ = ["IterationRecord", "LocalRunResult", "train_local"]
