"""The runtime's calls into the other parts (engines, rewards, datasets, PTL profiling), in one place.

Each function builds one part for a job from its spec; errors that are the user's (unknown reward, unreadable
dataset) are re-raised as `JobSetupError` with a message naming what to fix.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from contract import keys
from contract.devices import parse_device_sets
from contract.settings import get_settings
from contract.skew import ptl_to_json
from contract.spec import JobSpec
from workers.datasets import load_dataset
from workers.devices import current_device_set
from workers.dispatch.ptl import measure_ptl
from workers.generation.engine import GenerationEngine
from workers.generation.engines import setup_engine
from workers.rewards import Reward, SandboxUnavailable, build_reward
from workers.runtime.context import JobContext, JobSetupError

log = logging.getLogger(__name__)
PTL_TOKENS = 16


def worker_device() -> str:
    """The accelerator this worker uses (settings.device; `auto` = the GPU when torch sees one)."""
    configured = get_settings().device
    if configured != "auto":
        return configured
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def make_engine(spec: JobSpec, model_dir: Path, device: str | None = None) -> GenerationEngine:
    kwargs: dict[str, Any] = {"model_dir": model_dir, "max_batch_size": spec.generation.batch_size}
    if spec.generation.engine == "hf":  # vLLM picks its own device
        kwargs["seed"] = spec.seed
        kwargs["device"] = device or worker_device()
    else:
        vllm = spec.generation.vllm
        _check_device_set(vllm.tensor_parallel_size)
        kwargs.update(seed=spec.seed, dtype=vllm.dtype, max_model_len=vllm.max_model_len,
                      tensor_parallel_size=vllm.tensor_parallel_size,
                      gpu_memory_utilization=vllm.gpu_memory_utilization)
    return setup_engine(spec.generation.engine, **kwargs)


def _check_device_set(gpus: int) -> None:
    """A tensor-parallel instance needs that many GPUs in its process's device set (workers/devices.py)."""
    pinned = current_device_set()
    if gpus > 1 and pinned is not None:
        kind, _, ids = pinned.partition(":")
        owned = len(parse_device_sets(ids)[0]) if kind == "cuda" else 0
        if owned < gpus:
            raise JobSetupError(f"generation.vllm.tensor_parallel_size is {gpus} but this worker process owns "
                                f"{owned} GPU(s) ({pinned}): start generation workers with device sets of {gpus} GPUs "
                                f"(streamrl worker --devices)")


def make_reward(ctx: JobContext) -> Reward:
    """The job's reward; the first process to build a sandboxed one says in the job's events how it is confined."""
    try:
        reward = build_reward(ctx.spec.reward)
    except (ValueError, SandboxUnavailable) as err:
        raise JobSetupError(f"reward: {err}") from err
    first = ctx.redis is None or ctx.redis.set(keys.noted(ctx.job_id, "sandbox"), 1, nx=True, ex=86400)
    if reward.sandbox_mode is not None and first:
        protections = list(getattr(getattr(reward, "worker", None), "protections", []))
        ctx.reporter.record_event(ctx.job_id, "reward_sandbox", f"python reward runs in {reward.sandbox_mode} mode: "
                                  f"{', '.join(protections) or 'no details'}",
                                  {"mode": reward.sandbox_mode, "protections": protections})
    return reward


def load_rows(ctx: JobContext, split: str = "train", **params: Any) -> list[dict[str, Any]]:
    """The job's prompt rows (`params` go to a built-in task's generator); an uploaded dataset is read from the file
    the control plane stored."""
    dataset = ctx.spec.dataset
    if dataset.id is not None:
        dataset = dataset.model_copy(update={"id": None, "path": ctx.dataset_path})
    try:
        rows = load_dataset(dataset, split=split, seed=ctx.spec.seed, **params)
    except (ValueError, OSError) as err:
        raise JobSetupError(f"dataset: {err}") from err
    if split == "train" and not rows:
        raise JobSetupError("dataset: no training prompts")
    return rows


def profile_ptl_once(ctx: JobContext, engine: GenerationEngine) -> None:
    """The first instance of a job measures PTL(BS) for skew-aware dispatch and stores it with the job."""
    if not ctx.require_redis().set(keys.ptl_lock(ctx.job_id), 1, nx=True, ex=3600):
        return
    top = ctx.spec.generation.batch_size
    sizes = sorted({1, max(1, top // 4), max(1, top // 2), top})
    ctx.reporter.save_ptl(ctx.job_id, ptl_to_json(measure_ptl(engine, sizes, tokens=PTL_TOKENS)))
