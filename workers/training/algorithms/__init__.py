"""Algorithm registry: `setup_algorithm(spec)` returns the `Algorithm` named by `spec.name`."""

from __future__ import annotations

from contract.spec import AlgorithmSpec
from workers.training.algorithms.base import Algorithm, LossInputs, Metrics
from workers.training.algorithms.grpo import GRPO
from workers.training.algorithms.ppo import PPO
from workers.training.algorithms.reinforce_pp import ReinforcePP
from workers.training.algorithms.rloo import RLOO

ALGORITHMS: dict[str, type[Algorithm]] = {cls.name: cls for cls in (GRPO, PPO, RLOO, ReinforcePP)}


def setup_algorithm(spec: AlgorithmSpec) -> Algorithm:
    try:
        cls = ALGORITHMS[spec.name]
    except KeyError:
        raise ValueError(f"unknown algorithm {spec.name!r}; choose one of {sorted(ALGORITHMS)}") from None
    return cls(spec)


__all__ = ["ALGORITHMS", "Algorithm", "LossInputs", "Metrics", "setup_algorithm"]
