"""Which jobs run on shared generation instances (docs/operator.md#shared-generation-instances): the rule over plain
settings, so a validated `JobSpec` (`JobSpec.share_refusal`) and a stored spec read without validating it again (the
jobs list) give the same answer."""

from __future__ import annotations

from typing import Any


def share_refusal(*, lora: bool, engine: str, mode: str, weight_sync: str) -> str | None:
    """Why a job of these settings cannot run on shared generation instances (docs/operator.md#shared-generation-
    instances); None: it can."""
    if not lora:
        return "only LoRA jobs share generation instances (training.lora is not set)"
    if engine != "hf":
        return f"engine {engine!r} serves one job per instance; shared instances use engine 'hf'"
    if mode == "colocated":
        return "colocated mode generates in the trainer's own process"
    if weight_sync == "p2p":
        return "training.weight_sync 'p2p' needs a private instance: use 'auto' or 'shared_store'"
    return None


def stored_spec_shares_generation(spec: dict[str, Any]) -> bool:
    """`JobSpec.shares_generation` of a stored (validated, defaults filled) spec without validating it again."""
    generation, training = spec.get("generation") or {}, spec.get("training") or {}
    return generation.get("share") is not False and share_refusal(
        lora=training.get("lora") is not None, engine=str(generation.get("engine", "hf")),
        mode=str(spec.get("mode", "")), weight_sync=str(training.get("weight_sync", "shared_store"))) is None
