"""Generation engine implementations and the `setup_engine` factory.

`setup_engine("hf", model_dir=..., max_batch_size=..., device=...)`; `setup_engine("vllm", ...)` imports vLLM only
when the engine is built. Every module of this package is imported here, so an engine registers itself where it is
written (`@ENGINES.register("name", label=...)` on its class, with `from_spec` building it from a job's spec); a new
engine is one new module (docs/architecture.md#adding-an-extension).
"""

from __future__ import annotations

from typing import Any

from contract.registry import import_all
from workers.generation.engine import ENGINES, GenerationEngine

import_all(__name__, __path__)


def setup_engine(name: str, **kwargs: Any) -> GenerationEngine:
    return ENGINES.get(name)(**kwargs)


__all__ = ["ENGINES", "setup_engine"]
