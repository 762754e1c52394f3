"""`JobSpec`: everything a user states about one RL job.

Shared by the API (validation of submitted specs), the controller (admission, scaling bounds), the planner
and the workers (what to load, generate and train). Pure pydantic: importing it never pulls torch or vLLM.
Validation errors name the field and the reason (pydantic's `loc` + `msg`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

Mode = Literal["colocated", "sync", "async"]
EngineName = Literal["hf", "vllm"]
VLLMDtype = Literal["auto", "float32", "float16", "bfloat16"]
AlgorithmName = Literal["grpo", "ppo", "rloo", "reinforce_pp"]
DispatchPolicy = Literal["random", "round_robin", "skew_aware"]
BuiltinTask = Literal["arithmetic", "long_tail"]
WeightSyncBackend = Literal["p2p", "shared_store", "auto"]
MAX_SEED = 2**31 - 1
MAX_PARAMS_BYTES = 16 * 1024  # reward.params as JSON: specs are stored per job and listed by GET /jobs
MAX_STOP_STRINGS, MAX_STOP_CHARS = 64, 256


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a spec must not be silently ignored. NaN/Infinity are refused in every
    float field, and a boolean is never accepted where a number is expected (`true` is not 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation is not bool and annotation is not Any and bool not in get_args(annotation):
                raise ValueError("true/false is not accepted here: give a number")
        return value


def _check_json_value(value: Any, where: str) -> None:
    """`value` is plain JSON with finite numbers only (raises ValueError naming the place otherwise)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: NaN and Infinity are not allowed")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_json_value(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{where}[{index}]")


class DatasetSpec(_Strict):
    """Where prompts come from: exactly one of an uploaded dataset, a local JSONL path or a built-in task.

    Rows are JSON objects with at least `prompt` (str); `answer` and any other keys are passed to the reward.
    """

    id: int | None = Field(None, ge=1, le=2**31 - 1, description="id of a dataset uploaded to the control plane")
    path: str | None = Field(None, max_length=4096, description="local JSONL file (train-local only)")
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

    type: str = Field(
        "exact_match", min_length=1, max_length=100, description="built-in name, 'composite' or 'python'"
    )
    params: dict[str, Any] = Field(default_factory=dict, description=f"at most {MAX_PARAMS_BYTES} bytes as JSON")
    weight: float = Field(1.0, ge=-1e6, le=1e6)
    components: list[RewardSpec] = Field(default_factory=list, max_length=32)
    code: str | None = Field(None, max_length=100_000)

    @field_validator("params")
    @classmethod
    def _params_bounded(cls, params: dict[str, Any]) -> dict[str, Any]:
        _check_json_value(params, "params")
        try:
            size = len(json.dumps(params).encode())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"params must be plain JSON ({exc})") from None
        if size > MAX_PARAMS_BYTES:
            raise ValueError(f"params is {size} bytes as JSON; the limit is {MAX_PARAMS_BYTES}")
        return params

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


class VLLMSpec(_Strict):
    """Settings of the vLLM engine (`generation.engine: vllm` only)."""

    tensor_parallel_size: int = Field(1, ge=1, le=64, description="GPUs per instance (tensor parallel): the "
                                      "instance needs a worker process whose device set has that many GPUs")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="share of each GPU's memory vLLM may use "
                                          "for weights and KV cache")
    max_model_len: int | None = Field(None, ge=16, le=1_048_576, description="context length (prompt + response); "
                                      "None: the model's")
    dtype: VLLMDtype = Field("float32", description="weights and activations: float32 gives the trainer's logprobs; "
                             "bfloat16 is faster on GPUs (the importance ratio absorbs the rounding); auto: vLLM's "
                             "choice for the model")


class GenerationSpec(_Strict):
    engine: EngineName = "hf"
    instances: int | None = Field(None, ge=1, le=1024, description="None: use the planner's suggestion")
    batch_size: int = Field(32, ge=1, le=4096, description="max concurrent sequences per instance")
    temperature: float = Field(1.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(64, ge=1, le=131_072)
    stop: list[str] = Field(
        default_factory=list, max_length=MAX_STOP_STRINGS, description=f"up to {MAX_STOP_STRINGS} stop strings"
    )

    vllm: VLLMSpec = Field(default_factory=VLLMSpec, description="vLLM engine settings (engine vllm only)")

    @field_validator("stop")
    @classmethod
    def _stop_strings_bounded(cls, stop: list[str]) -> list[str]:
        for index, text in enumerate(stop):
            if not text or len(text) > MAX_STOP_CHARS:
                raise ValueError(f"stop[{index}] must be 1-{MAX_STOP_CHARS} characters")
        return stop

    @model_validator(mode="after")
    def _engine_settings(self) -> GenerationSpec:
        if self.engine != "vllm" and self.vllm != VLLMSpec():
            raise ValueError(f"`vllm` settings apply to engine 'vllm' only (this spec uses {self.engine!r})")
        if self.vllm.max_model_len is not None and self.vllm.max_model_len <= self.max_tokens:
            raise ValueError(f"vllm.max_model_len ({self.vllm.max_model_len}) must exceed max_tokens "
                             f"({self.max_tokens}): it holds the prompt and the response")
        return self


class TrainingSpec(_Strict):
    devices: int = Field(1, ge=1, le=4096)
    iterations: int = Field(20, ge=1, le=1_000_000, description="optimiser steps (one per iteration)")
    prompts_per_iteration: int = Field(16, ge=1, le=1_000_000)
    micro_batch_size: int = Field(16, ge=1, le=65_536, description="samples per micro-step (gradient accumulation)")
    max_tokens_per_micro_batch: int | None = Field(
        None, ge=1, le=16_777_216, description="padded-token budget of a forward pass: micro-batches are cut in "
        "length order so rows x longest sequence stays within it (a longer sequence runs alone); same gradient, "
        "less compute on padding. None: cut by micro_batch_size only"
    )
    bf16_autocast: bool = Field(False, description="run forward passes under bfloat16 autocast (weights, gradients "
                                "and optimizer state stay float32)")
    torch_compile: bool = Field(False, description="torch.compile the policy (dynamic shapes); the first steps pay "
                                "the compilation")
    lr: float = Field(1e-4, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    weight_sync: WeightSyncBackend = Field("shared_store", description="how new weights reach the generation "
                                           "instances: p2p (torch.distributed, trainer to each instance), shared_store "
                                           "(safetensors on the artifact store) or auto (p2p where an instance can "
                                           "reach the trainer, else the shared store)")
    eval_every: int = Field(5, ge=0, le=1_000_000, description="held-out reward (one sample per eval prompt, at the "
                            "current weights) every N iterations and after the last; 0: never")


    @field_validator("weight_sync", mode="before")
    @classmethod
    def _old_weight_sync(cls, value: Any) -> Any:
        """Specs stored before p2p existed may say `broadcast` (the runtime ran them on the shared store): they run
        as `auto`, which is that plus p2p where the trainer is reachable."""
        return "auto" if value == "broadcast" else value


class DispatchSpec(_Strict):
    policy: DispatchPolicy = "random"
    alpha: float = Field(0.2, gt=0, lt=1, description="share of prompts treated as long-tail")


class AutoscaleSpec(_Strict):
    policy: Literal["manual", "auto"] = "manual"
    min_instances: int = Field(1, ge=1, le=1024)
    max_instances: int = Field(4, ge=1, le=1024)
    cooldown_s: float = Field(30.0, ge=0, le=86_400)
    hysteresis: int = Field(3, ge=1, le=100, description="consecutive iterations, measured at the current instance "
                            "count, that must agree before the autoscaler changes it")
    threshold_s: float = Field(0.0, ge=0, le=86_400, description="extra margin in seconds: scale only when the "
                               "imbalance exceeds what one instance more (or fewer) changes by at least this much")

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
    interval: int = Field(10, ge=1, le=1_000_000, description="checkpoint every N iterations")
    keep: int = Field(3, ge=1, le=1000)


class JobSpec(_Strict):
    """One RL job. Defaults give a small, sane GRPO run."""

    name: str = Field("job", min_length=1, max_length=200)
    model: str = Field(
        ..., min_length=1, max_length=1000, description="registered model name (or path for train-local)"
    )
    tokenizer: str | None = Field(None, max_length=1000, description="defaults to the model's own tokenizer")
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
    seed: int = Field(0, ge=0, le=MAX_SEED)

    @model_validator(mode="after")
    def _weight_sync_needs_instances(self) -> JobSpec:
        if self.mode == "colocated" and self.training.weight_sync == "p2p":
            raise ValueError("training.weight_sync 'p2p' sends weights to separate generation instances; colocated "
                             "mode generates in the trainer's process: use shared_store or auto")
        return self

    @model_validator(mode="after")
    def _budget_keeps_the_loss_exact(self) -> JobSpec:
        if self.training.max_tokens_per_micro_batch is not None and self.algorithm.name == "reinforce_pp":
            raise ValueError("training.max_tokens_per_micro_batch cannot be used with reinforce_pp: it whitens "
                             "advantages over each micro-batch, so cutting by tokens would change its loss")
        if self.training.max_tokens_per_micro_batch is not None and self.training.devices > 1:
            # each rank would cut its share into its own number of passes, and FSDP's collectives run per pass
            raise ValueError("training.max_tokens_per_micro_batch is not supported with training.devices > 1 yet "
                             "(every rank must run the same number of forward/backward passes)")
        return self
