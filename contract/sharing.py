"""Which jobs run on shared generation instances and in shared training processes (docs/operator.md): the rules over
plain settings, so a validated `JobSpec` (`share_refusal`, `training_share_refusal`) and a stored spec read without
validating it again (the jobs list) give the same answer."""

from __future__ import annotations

import json
from typing import Any

SHARED_ENGINES = ("hf", "vllm")  # engines with a multi-adapter form (workers/runtime/shared.py builds it)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"training.lora.rank {rank} is above the largest LoRA rank the vllm engine serves "
                     f"({VLLM_LORA_RANKS[-1]}): lower it or use engine 'hf'")


def share_refusal(*, lora: bool, engine: str, mode: str, weight_sync: str) -> str | None:
    """Why a job of these settings cannot run on shared generation instances (docs/operator.md#shared-generation-
    instances); None: it can."""
    if not lora:
        return "only LoRA jobs share generation instances (training.lora is not set)"
    if engine not in SHARED_ENGINES:
        return f"engine {engine!r} serves one job per instance; shared instances use {' or '.join(SHARED_ENGINES)}"
    if mode == "colocated":
        return "colocated mode generates in the trainer's own process"
    if weight_sync == "p2p":
        return "training.weight_sync 'p2p' needs a private instance: use 'auto' or 'shared_store'"
    return None


def training_share_refusal(*, lora: bool, mode: str, devices: int, weight_sync: str) -> str | None:
    """Why a job of these settings cannot train in a shared process (docs/operator.md#shared-training-processes);
    None: it can."""
    if not lora:
        return "only LoRA jobs share a training process (training.lora is not set): a full fine-tune changes the base"
    if mode == "colocated":
        return "colocated mode generates in the trainer's own process"
    if devices != 1:
        return "a multi-device trainer (training.devices > 1) holds its own ranks"
    if weight_sync == "p2p":
        return "training.weight_sync 'p2p' opens a process group per trainer: use 'auto' or 'shared_store'"
    return None


def stored_spec_shares_training(spec: dict[str, Any]) -> bool:
    """`JobSpec.shares_training` of a stored (validated, defaults filled) spec without validating it again."""
    training = spec.get("training") or {}
    return bool(training.get("share")) and training_share_refusal(
        lora=training.get("lora") is not None, mode=str(spec.get("mode", "")), devices=int(training.get("devices", 1)),
        weight_sync=str(training.get("weight_sync", "shared_store"))) is None


def stored_spec_shares_generation(spec: dict[str, Any]) -> bool:
    """`JobSpec.shares_generation` of a stored (validated, defaults filled) spec without validating it again."""
    generation, training = spec.get("generation") or {}, spec.get("training") or {}
    return generation.get("share") is not False and share_refusal(
        lora=training.get("lora") is not None, engine=str(generation.get("engine", "hf")),
        mode=str(spec.get("mode", "")), weight_sync=str(training.get("weight_sync", "shared_store"))) is None


def share_settings(*, engine: str, lora_rank: int | None, vllm: dict[str, Any], speculative: str = "auto") -> str:
    """Besides the base model, what sharing jobs must have in common to run in one process: the engine and, for
    vLLM, its settings (`generation.vllm`) and the LoRA rank its adapter slots are sized for (`vllm_lora_rank`:
    ranks 2-8 meet); for hf, whether it speculates (`generation.speculative` off meets only off: a job that turned
    speculation off to compare never gets a speculating process; auto and group meet, auto being group on hf)."""
    if engine == "vllm" and lora_rank is not None:
        return f"vllm|{json.dumps(vllm, sort_keys=True)}|rank<={vllm_lora_rank(lora_rank)}"
    return f"{engine}|speculative-off" if engine == "hf" and speculative == "off" else engine
