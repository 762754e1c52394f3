"""Generation engine implementations and the `setup_engine` factory.

`setup_engine("hf", model_dir=..., max_batch_size=..., device=...)`; `setup_engine("vllm", ...)` imports vLLM only
when asked for.
"""

from __future__ import annotations

from typing import Any

from workers.generation.engine import GenerationEngine

ENGINE_NAMES = ("hf", "vllm")


def setup_engine(name: str, **kwargs: Any) -> GenerationEngine:
    if name == "hf":
        from workers.generation.engines.hf import HFEngine

        return HFEngine(**kwargs)
    if name == "vllm":
        from workers.generation.engines.vllm import VLLMEngine

        return VLLMEngine(**kwargs)
    raise ValueError(f"unknown engine {name!r}; choose one of {list(ENGINE_NAMES)}")


__all__ = ["ENGINE_NAMES", "setup_engine"]
