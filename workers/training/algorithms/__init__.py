"""Algorithm registry: `setup_algorithm(spec)` returns the `Algorithm` named by `spec.name`.

Every module of this package is imported here, so an algorithm registers itself where it is written
(`@ALGORITHMS.register("name", label=..., train_flops_per_param=...)` on its class, contract/registry.py); a new
algorithm is one new module (docs/architecture.md#adding-an-extension).
"""

from __future__ import annotations

from contract.registry import import_all
from contract.spec import AlgorithmSpec
from workers.training.algorithms.base import ALGORITHMS, Algorithm, LossInputs, Metrics

import_all(__name__, __path__, skip={"base"})


def setup_algorithm(spec: AlgorithmSpec) -> Algorithm:
    return ALGORITHMS.get(spec.name)(spec)


__all__ = ["ALGORITHMS", "Algorithm", "LossInputs", "Metrics", "setup_algorithm"]
