"""`JobSpec`: everything a user states about one RL job.

Shared by the API (validation of submitted specs), the controller (admission, scaling bounds), the planner
and the workers (what to load, generate and train). Pure pydantic: importing it never pulls torch or vLLM.
Validation errors name the field and the reason (pydantic's `loc` + `msg`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Mode = Literal["colocated", "sync", "async"]
EngineName = Literal["hf", "vllm"]
AlgorithmName = Literal["grpo", "ppo", "rloo", "reinforce_pp"]
DispatchPolicy = Literal["random", "round_robin", "skew_aware"]
BuiltinTask = Literal["arithmetic", "long_tail"]
WeightSyncBackend = Literal["shared_store", "broadcast"]


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a spec must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    """Where prompts come from: exactly one of an uploaded dataset, a local JSONL path or a built-in task.

    Rows are JSON objects with at least `prompt` (str); `answer` and any other keys are passed to the reward.
    """

    id: int | None = Field(None, description="id of a dataset uploaded to the control plane")
    path: str | None = Field(None, description="local JSONL file (train-local only)")
    builtin: BuiltinTask | None = Field(None, description="generate prompts from a built-in task")
    num_prompts: int = Field(256, ge=1, le=1_000_000, description="prompts to generate for a built-in task")
    eval_prompts: int = Field(64, ge=0, le=100_000, description="held-out prompts for evaluation")

    @model_validator(mode="after")
    def _exactly_one_source(self) -> DatasetSpec:
        given = [name for name in ("id", "path", "builtin") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of id, path, builtin (got {given or 'none'})")
        return self


class RewardSpec(_Strict):
    """A reward: a built-in by `type` with `params`, a weighted `composite` of `components`, or sandboxed `python` code.

    User code defines `def reward(prompt: str, response: str, meta: dict) -> float | dict`.
    """

    type: str = Field("exact_match", min_length=1, description="built-in name, 'composite' or 'python'")
    params: dict[str, Any] = Field(default_factory=dict)
    weight: float = 1.0
    components: list[RewardSpec] = Field(default_factory=list)
    code: str | None = Field(None, max_length=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> RewardSpec:
        if self.type == "python" and not self.code:
            raise ValueError("type 'python' needs `code` defining reward(prompt, response, meta)")
        if self.type != "python" and self.code:
            raise ValueError("`code` is only used with type 'python'")
        if self.type == "composite" and not self.components:
            raise ValueError("type 'composite' needs at least one entry in `components`")
        return self


class AlgorithmSpec(_Strict):
    name: AlgorithmName = "grpo"
    group_size: int = Field(8, ge=1, le=1024, description="samples per prompt")
    clip_eps: float = Field(0.2, gt=0, lt=1)
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the frozen reference policy")
    entropy_coef: float = Field(0.0, ge=0)
    gamma: float = Field(1.0, gt=0, le=1, description="PPO/GAE discount")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    vf_coef: float = Field(0.5, ge=0, description="PPO value-loss weight")
    is_cap: float = Field(2.0, ge=1, description="truncation of the importance ratio vs behaviour logprobs")


class GenerationSpec(_Strict):
    engine: EngineName = "hf"
    instances: int | None = Field(None, ge=1, le=1024, description="None: use the planner's suggestion")
    batch_size: int = Field(32, ge=1, le=4096, description="max concurrent sequences per instance")
    temperature: float = Field(1.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(64, ge=1, le=131_072)
    stop: list[str] = Field(default_factory=list)


class TrainingSpec(_Strict):
    devices: int = Field(1, ge=1, le=4096)
    iterations: int = Field(20, ge=1, le=1_000_000, description="optimiser steps (one per iteration)")
    prompts_per_iteration: int = Field(16, ge=1, le=1_000_000)
    micro_batch_size: int = Field(16, ge=1, le=65_536, description="samples per micro-step (gradient accumulation)")
    lr: float = Field(1e-4, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    weight_sync: WeightSyncBackend = "shared_store"
    eval_every: int = Field(5, ge=0, le=1_000_000, description="held-out reward (one sample per eval prompt, at the "
                            "current weights) every N iterations and after the last; 0: never")


class DispatchSpec(_Strict):
    policy: DispatchPolicy = "random"
    alpha: float = Field(0.2, gt=0, lt=1, description="share of prompts treated as long-tail")


class AutoscaleSpec(_Strict):
    policy: Literal["manual", "auto"] = "manual"
    min_instances: int = Field(1, ge=1)
    max_instances: int = Field(4, ge=1)
    cooldown_s: float = Field(30.0, ge=0)
    hysteresis: int = Field(3, ge=1, le=100, description="consecutive iterations, measured at the current instance "
                            "count, that must agree before the autoscaler changes it")
    threshold_s: float = Field(0.0, ge=0, description="extra margin in seconds: scale only when the imbalance "
                               "exceeds what one instance more (or fewer) changes by at least this much")

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleSpec:
        if self.min_instances > self.max_instances:
            raise ValueError("min_instances must be <= max_instances")
        return self


class FailoverSpec(_Strict):
    """What happens when a job's processes die: the controller restarts the driver from the newest checkpoint."""

    max_restarts: int = Field(3, ge=0, le=100, description="driver restarts after unplanned deaths before the job "
                              "fails (clean hand-backs on worker shutdown do not count)")
    backoff_s: float = Field(5.0, ge=0, le=3600, description="wait before restart k: backoff_s * 2**(k-1)")
    instance_crash_loop: int = Field(5, ge=1, le=1000, description="consecutive instance failures with the same "
                                     "error after which instances are no longer replaced and the job fails")


class TelemetrySpec(_Strict):
    """What each iteration keeps for the dashboard besides its metrics row."""

    samples_per_iteration: int = Field(8, ge=0, le=1024, description="full samples (prompt, response, reward)")
    lengths_per_iteration: int = Field(256, ge=0, le=65_536, description="response lengths for the histogram")


class CheckpointSpec(_Strict):
    interval: int = Field(10, ge=1, description="checkpoint every N iterations")
    keep: int = Field(3, ge=1)


class JobSpec(_Strict):
    """One RL job. Defaults give a small, sane GRPO run."""

    name: str = Field("job", min_length=1, max_length=200)
    model: str = Field(..., min_length=1, description="registered model name (or path for train-local)")
    tokenizer: str | None = Field(None, description="defaults to the model's own tokenizer")
    dataset: DatasetSpec
    reward: RewardSpec = Field(default_factory=RewardSpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    mode: Mode = "sync"
    max_staleness: int = Field(1, ge=1, le=64, description="async: max policy versions a sample may lag")
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    dispatch: DispatchSpec = Field(default_factory=DispatchSpec)
    autoscale: AutoscaleSpec = Field(default_factory=AutoscaleSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    failover: FailoverSpec = Field(default_factory=FailoverSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    seed: int = 0
