"""Request/response schemas of `POST /api/v1/plans`, the device catalog routes and `streamrl plan`.

Modes, algorithms and dispatch policies are the `contract.spec` Literals, so the planner, the JobSpec and the
dashboard (through the OpenAPI enums) offer the same choices.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from backend.planner.simulator import COLOCATED_NOT_SHARED
from backend.schemas.common import MAX_ID, RequestModel
from contract.catalog import DispatchPolicy
from contract.spec import AlgorithmName, JobSpec, Mode

MAX_PLAN_PROMPTS = 4096  # the simulator dispatches prompts one by one: keeps a plan within seconds
MAX_PLAN_SAMPLES = 65_536
_STALENESS = JobSpec.model_fields["max_staleness"]


class _Strict(RequestModel):
    """Unknown keys, true/false for numbers and non-finite floats are 422."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ClusterSpec(_Strict):
    device: str = Field("H800", min_length=1, description="a device name from the catalog")
    count: int = Field(..., ge=1, le=16_384)


class LengthSpec(_Strict):
    kind: Literal["lognormal", "pareto", "empirical"] = "lognormal"
    max_tokens: int = Field(20_000, ge=1, le=1_000_000)
    median: float = Field(2_000.0, gt=0)
    sigma: float = Field(1.0, ge=0, le=5)
    pareto_alpha: float = Field(1.5, gt=0)
    pareto_min: float = Field(500.0, gt=0)
    values: list[float] = Field(default_factory=list, max_length=1_000_000, description="empirical lengths")

    @model_validator(mode="after")
    def _values_for_empirical(self) -> LengthSpec:
        if self.kind == "empirical" and not self.values:
            raise ValueError("kind 'empirical' needs a non-empty `values` list of output lengths")
        if any(v <= 0 for v in self.values):
            raise ValueError("`values` must all be positive lengths")
        return self


class PlanRequest(_Strict):
    """One cluster: generation and training share `clusters[0]`. Two clusters: generation on [0], training on [1]."""

    model_size: str | None = Field("7B", description="7B, 14B, 32B, 72B or a number of billions ('13B')")
    model_params_b: float | None = Field(None, gt=0, le=2000, description="overrides model_size")
    clusters: list[ClusterSpec] = Field(default_factory=lambda: [ClusterSpec(count=8)], min_length=1, max_length=2)
    tp: int | None = Field(None, ge=1, le=64, description="tensor parallelism per generation instance; None: fit")
    mode: Mode = "sync"
    max_staleness: Annotated[int, _STALENESS] = _STALENESS.default  # the JobSpec's field: same bounds and default
    lengths: LengthSpec = Field(default_factory=LengthSpec)
    prompts_per_iteration: int = Field(256, ge=1, le=MAX_PLAN_PROMPTS)
    group_size: int = Field(8, ge=1, le=1024)
    prompt_tokens: int = Field(512, ge=0, le=1_000_000)
    algorithm: AlgorithmName = "grpo"
    mfu: float = Field(0.4, gt=0, le=1, description="training model-FLOPs utilisation")
    dispatch: DispatchPolicy = "skew_aware"
    alpha: float = Field(0.2, gt=0, lt=1)
    max_batch_size: int | None = Field(None, ge=1, le=65_536, description="sequences per instance; None: KV memory")
    shared_jobs: int = Field(
        1, ge=1, le=64,
        description="LoRA jobs of this shape on the same base model sharing the generation instances (this one "
                    "included): each instance's batch holds all their rows and its cost is split among them")
    ptl_profile: list[tuple[int, float]] | None = Field(
        None, description="measured [batch_size, seconds_per_token] points; replaces the roofline")
    train_seconds_per_token: float | None = Field(
        None, gt=0, description="measured training seconds per token on one device; replaces the roofline")
    tail_tokens_per_forward: float | None = Field(
        None, ge=1, le=64,
        description="grouped speculative decoding: measured tokens per forward pass while speculating (a job's "
                    "`tail_tokens_per_forward` iteration metric); the tail (at most a quarter of the batch still "
                    "decoding) costs PTL(BS) / this per token. null: 1 (no speculation), or the job's median with "
                    "from_job_id")
    elastic: bool = Field(False, description="simulate the autoscaler adding/removing generation instances")
    length_growth: float = Field(0.0, ge=-0.5, le=1.0, description="response-length growth per iteration")
    from_job_id: int | None = Field(
        None, ge=1, le=MAX_ID,
        description="API only: use this job's recorded response lengths as an empirical distribution")
    iterations: int = Field(3, ge=2, le=50, description="simulated iterations (the first is warm-up)")
    timeline_lanes: int = Field(8, ge=1, le=256, description="generation lanes kept in the returned timeline")
    seed: int = Field(0, ge=0, le=2**32 - 1)

    @model_validator(mode="after")
    def _model_given(self) -> PlanRequest:
        if self.model_size is None and self.model_params_b is None:
            raise ValueError("set model_size or model_params_b")
        if self.prompts_per_iteration * self.group_size > MAX_PLAN_SAMPLES:
            raise ValueError(f"prompts_per_iteration * group_size must be <= {MAX_PLAN_SAMPLES} samples per "
                             f"iteration for planning, got {self.prompts_per_iteration * self.group_size}")
        if self.mode == "colocated" and len(self.clusters) == 2:
            raise ValueError("mode 'colocated' runs on one cluster: give one entry in `clusters`")
        return self

    @field_validator("shared_jobs")
    @classmethod
    def _colocated_never_shares(cls, value: int, info: ValidationInfo) -> int:
        if value > 1 and info.data.get("mode") == "colocated":
            raise ValueError(COLOCATED_NOT_SHARED)
        return value


class AllocationPublic(BaseModel):
    gen_device: str
    gen_devices: int
    gen_instances: int
    tp: int
    train_device: str
    train_devices: int
    freed_devices: int
    cost_per_hour: float = Field(
        description="relative price per hour of the devices this job uses: its training devices in full plus "
                    "gen_devices * price / shared_jobs (jobs sharing the generation instances split their cost)")


class PredictionPublic(BaseModel):
    mode: Mode
    iteration_seconds: float
    gen_seconds: float
    train_seconds: float
    samples_per_s: float
    tokens_per_s: float
    throughput_per_cost: float = Field(
        description="samples/s per relative device-hour: samples_per_s over the allocation's cost_per_hour (with "
                    "shared generation instances, this job's share of them)")
    gen_bubble_fraction: float
    train_bubble_fraction: float
    shared_jobs: int = Field(
        1, description="jobs sharing the generation instances in this row's simulation: the request's shared_jobs, "
                       "but always 1 for colocated (it generates in the trainer's own process and never shares)")


class SpanPublic(BaseModel):
    lane: str
    kind: Literal["generating", "loading_weights", "idle", "training", "waiting"]
    start: float
    end: float


class PlanPublic(BaseModel):
    model: dict[str, float | int | str]
    allocation: AllocationPublic
    estimate: dict[str, float]  # Algorithm 1's profile numbers: gen_seconds, train_seconds, iteration_seconds
    predicted: PredictionPublic  # the simulated requested mode on the chosen allocation
    per_mode: dict[str, PredictionPublic]
    recommended_mode: Mode  # the simulated mode with the most samples/s (ties: per cost), whatever was requested
    recommended_allocation: AllocationPublic  # the devices that mode runs on
    timeline: list[SpanPublic]
    plan_seconds: float


class DevicePublic(BaseModel):
    name: str
    bf16_tflops: float
    mem_bandwidth_tbps: float
    memory_gb: float
    cost_per_hour: float
    interconnect_gbps: float
    overridden: bool


class DevicesPublic(BaseModel):
    data: list[DevicePublic]
    count: int


class DeviceUpdate(_Strict):
    bf16_tflops: float = Field(..., gt=0)
    mem_bandwidth_tbps: float = Field(..., gt=0)
    memory_gb: float = Field(..., gt=0)
    cost_per_hour: float = Field(..., gt=0)
    interconnect_gbps: float = Field(400.0, gt=0)
