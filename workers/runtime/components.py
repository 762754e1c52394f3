"""The runtime's calls into the other parts (engines, rewards, datasets, PTL profiling), in one place.

Each function builds one part for a job from its spec; errors that are the user's (unknown reward, unreadable
dataset) are re-raised as `JobSetupError` with a message naming what to fix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract import keys
from contract.devices import parse_device_sets
from contract.settings import get_settings
from contract.skew import ptl_to_json
from contract.spec import JobSpec
from workers.core.episode import EpisodeRunner
from workers.core.rollout import sampling_params
from workers.datasets import load_dataset
from workers.devices import current_device_set
from workers.dispatch.ptl import measure_ptl
from workers.environments import build_environment
from workers.generation.engine import GenerationEngine
from workers.generation.engines import ENGINES
from workers.rewards import Reward, SandboxUnavailable, build_reward
from workers.rewards.grader_models import LocalGraderModels
from workers.runtime.context import HostMissing, JobContext, JobSetupError
from workers.runtime.teacher import TeacherScorer

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
    engine = ENGINES.get(spec.generation.engine)
    _check_device_set(engine.gpus_per_instance(spec))
    return engine.from_spec(spec, model_dir, device or worker_device())


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


def make_reward(ctx: JobContext) -> Reward | None:
    """The job's grading reward (`JobSpec.grading`: `reward`, or an environment's `grader`; None: an environment job
    rewarded by its steps alone); the first process to build a sandboxed one says in the job's events how it is
    confined."""
    if ctx.spec.grading is None:
        return None
    spec, place = ctx.spec.grading
    try:
        models = LocalGraderModels(ctx.grader_models, worker_device()) if ctx.grader_models else None
        reward = build_reward(spec, models)
    except SandboxUnavailable as err:
        raise HostMissing(f"{'.'.join(place)}: {err}") from err
    except ValueError as err:
        raise JobSetupError(f"{'.'.join(place)}: {err}") from err
    first = ctx.redis is None or ctx.redis.set(keys.noted(ctx.job_id, "sandbox"), 1, nx=True, ex=86400)
    if reward.sandbox_mode is not None and first:
        protections = list(getattr(getattr(reward, "worker", None), "protections", []))
        ctx.reporter.record_event(ctx.job_id, "reward_sandbox", f"python reward runs in {reward.sandbox_mode} mode: "
                                  f"{', '.join(protections) or 'no details'}",
                                  {"mode": reward.sandbox_mode, "protections": protections})
    return reward


def make_teacher(ctx: JobContext, device: str | None = None) -> TeacherScorer | None:
    """The distillation teacher (algorithm.teacher) scoring this process's samples; None without one."""
    if ctx.teacher_dir is None:
        return None
    if not (ctx.teacher_dir / "config.json").is_file():
        raise JobSetupError(f"algorithm.teacher: {ctx.spec.algorithm.teacher!r} has no model at {ctx.teacher_dir}")
    return TeacherScorer(ctx.teacher_dir, ctx.spec.generation.temperature, device or worker_device(),
                         topk=ctx.spec.algorithm.teacher_topk or 0)


def make_episode_runner(ctx: JobContext, tokenizer: Any) -> EpisodeRunner | None:
    """The job's episode loop (spec.environment), None for single-turn jobs. The first process to start a jailed
    environment says in the job's events how it is confined, as for python rewards."""
    spec = ctx.spec.environment
    if spec is None:
        return None
    try:
        env = build_environment(spec)
    except SandboxUnavailable as err:
        raise HostMissing(f"environment: {err}") from err
    except ValueError as err:
        raise JobSetupError(f"environment: {err}") from err
    try:
        runner = EpisodeRunner(env, tokenizer, spec, sampling_params(ctx.spec.generation),
                               system_prompt=ctx.spec.dataset.system_prompt)
    except ValueError as err:
        env.close()
        raise JobSetupError(f"environment: {err}") from err
    first = ctx.redis is None or ctx.redis.set(keys.noted(ctx.job_id, "env-sandbox"), 1, nx=True, ex=86400)
    if env.sandbox_mode is not None and first:
        ctx.reporter.record_event(ctx.job_id, "reward_sandbox", f"python environment runs in {env.sandbox_mode} "
                                  f"mode: {', '.join(env.protections) or 'no details'}",
                                  {"mode": env.sandbox_mode, "protections": env.protections})
    return runner


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


def check_chat_template(rows: Sequence[dict[str, Any]], tokenizer: Any) -> None:
    """Chat-form prompts need the model's chat template: say so at setup, not at the first iteration."""
    if any(not isinstance(row["prompt"], str) for row in rows) and not getattr(tokenizer, "chat_template", None):
        raise JobSetupError("dataset: the rows are chat conversations but the model's tokenizer has no chat "
                            "template (tokenizer_config.json `chat_template` or chat_template.jinja)")


def profile_ptl_once(ctx: JobContext, engine: GenerationEngine) -> None:
    """The first instance of a job measures PTL(BS) for skew-aware dispatch and stores it with the job."""
    if not ctx.require_redis().set(keys.ptl_lock(ctx.job_id), 1, nx=True, ex=3600):
        return
    top = ctx.spec.generation.batch_size
    sizes = sorted({1, max(1, top // 4), max(1, top // 2), top})
    ctx.reporter.save_ptl(ctx.job_id, ptl_to_json(measure_ptl(engine, sizes, tokens=PTL_TOKENS)))
