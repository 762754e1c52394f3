"""`JobSpec`: everything a user states about one RL job.

Shared by the API (validation of submitted specs), the controller (admission, scaling bounds), the planner
and the workers (what to load, generate and train). Pure pydantic: importing it never pulls torch or vLLM.
Validation errors name the field and the reason (pydantic's `loc` + `msg`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from contract import form_defaults, sharing
from contract.agent import AgentSpec
from contract.catalog import (
    ALGORITHMS,
    ENGINES,
    AlgorithmName,
    EngineName,
)
from contract.environments import GATEWAY, THROUGH_GATEWAY
from contract.scheduling import PRIORITIES, Priority
from contract.spec_base import StrictModel, choice_list
from contract.spec_environment import EnvironmentSpec  # also imported from here
from contract.spec_operations import (
    AutoscaleSpec,
    CheckpointSpec,
    DispatchSpec,
    FailoverSpec,
    LimitsSpec,
    TelemetrySpec,
)
from contract.spec_tasks import (  # DatasetSpec, RewardSpec and EvalSuiteSpec are also imported from here
    DatasetSpec,
    EvalSuiteSpec,
    RewardSpec,
)

Mode = Literal["colocated", "sync", "async"]
MODES: dict[str, dict[str, str]] = {  # the dashboard's labels (OpenAPI `x-choices`)
    "colocated": {"label": "colocated (baseline)"},
    "sync": {"label": "sync (dynamic-batch pipelining)"},
    "async": {"label": "async (bounded-staleness pipelining)"},
}
VLLMDtype = Literal["auto", "float32", "float16", "bfloat16"]
ISLevel = Literal["token", "sequence"]  # algorithm.is_level
HFDtype = Literal["float32", "bfloat16", "float16"]  # generation.dtype (the hf engine)
WeightSyncBackend = Literal["p2p", "shared_store", "auto"]
MAX_SEED = 2**31 - 1
MAX_STOP_STRINGS, MAX_STOP_CHARS = 64, 256


# algorithm.teacher_topk and topk_coef (distill): the defaults, chosen on bench/distill.py (k 4/8/16 alike; coef 10
# the best of 0.3-30 on both seed sets: docs/tinker.md#distillation-bench), and the most k a job may ask (as Tinker's
# topk_prompt_logprobs, backend/services/tinker_sampling.py MAX_TOPK)
TEACHER_TOPK_DEFAULT = 8
TOPK_COEF_DEFAULT = 10.0
TEACHER_TOPK_MAX = 64


class AlgorithmSpec(StrictModel):
    name: AlgorithmName = Field("grpo", json_schema_extra=choice_list(ALGORITHMS))
    group_size: int = Field(8, ge=1, le=1024, description="samples per prompt")
    clip_eps: float = Field(0.2, gt=0, lt=1)
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the frozen reference policy")
    entropy_coef: float = Field(0.0, ge=0)
    gamma: float = Field(1.0, gt=0, le=1, description="PPO/GAE discount")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    vf_coef: float = Field(0.5, ge=0, description="PPO value-loss weight")
    is_cap: float = Field(2.0, ge=1, description="truncation of the importance ratio vs behaviour logprobs")
    is_level: ISLevel = Field("token", description="training-inference correction (workers/training/algorithms/"
                              "importance.py): token: each token's weight min(pi_trainer/pi_behaviour, is_cap); "
                              "sequence: one weight per sample, the product of its tokens' ratios, capped at is_cap. "
                              "With sequence or is_mask the PPO ratio is taken against the trainer's own logprobs and "
                              "the weight corrects for the behaviour policy (decoupled PPO); with token and no is_mask "
                              "the ratio is taken against the behaviour logprobs directly (no weight)")
    is_mask: list[float] | None = Field(None, min_length=2, max_length=2, description="[low, high]: masked "
                                        "importance sampling: a token (is_level token) or a whole sample (sequence) "
                                        "whose ratio pi_trainer/pi_behaviour leaves [low, high] gets no loss")
    mismatch_ratio: float = Field(2.0, gt=1, description="c of the mismatch_out_fraction metric: the share of "
                                  "on-policy tokens whose ratio pi_trainer/pi_behaviour leaves [1/c, c]")
    # on-policy distillation (name: distill, workers/training/algorithms/distill.py)
    teacher: str | None = Field(None, min_length=1, max_length=200, description="distill: the team's registered "
                                "model that scores every sampled token (it must share the student's tokenizer); "
                                "the per-token advantage is the negative reverse KL log pi_teacher - log pi_student")
    kl_discount: float = Field(0.0, ge=0, le=1, description="distill: discount of later tokens' reverse KL in a "
                               "token's advantage (0: each token its own KL; 1: the KL of the rest of the response)")
    reward_coef: float = Field(0.0, ge=0, description="distill: weight of the task reward's group-normalised "
                               "advantage (GRPO's) added to every token's distillation advantage (0: teacher only)")
    teacher_topk: int | None = Field(None, ge=0, le=TEACHER_TOPK_MAX, description="distill: the teacher also "
                                     "returns its k most likely tokens and their logprobs at every response position, "
                                     "and the loss adds topk_coef x the forward KL from the teacher to the student "
                                     "over those k tokens and the rest of the vocabulary as one bucket (a dense signal "
                                     "on tokens the student did not sample; 0: off, the sampled tokens' reverse KL "
                                     f"only; unset: {TEACHER_TOPK_DEFAULT} for distill)")
    topk_coef: float = Field(TOPK_COEF_DEFAULT, ge=0, le=100, description="distill: weight of the teacher_topk term "
                             "(per token, added to the sampled-token loss)")

    @model_validator(mode="after")
    def _check_is_mask(self) -> AlgorithmSpec:
        if self.is_mask is not None and not 0 <= self.is_mask[0] < 1 < self.is_mask[1]:
            raise ValueError(f"is_mask: [low, high] needs 0 <= low < 1 < high (got {self.is_mask})")
        return self

    @model_validator(mode="after")
    def _check_teacher(self) -> AlgorithmSpec:
        if self.name == "distill" and self.teacher is None:
            raise ValueError("algorithm distill needs teacher: the registered model to distil from")
        if self.name != "distill" and self.teacher is not None:
            raise ValueError(f"teacher is an option of algorithm distill, not of {self.name!r} (use name: distill "
                             "with reward_coef > 0 to combine the teacher with the task reward)")
        if self.name != "distill":
            if self.teacher_topk:
                raise ValueError(f"teacher_topk is an option of algorithm distill, not of {self.name!r}")
            return self
        if self.teacher_topk is None:
            self.teacher_topk = TEACHER_TOPK_DEFAULT
        if self.teacher_topk > 0 and self.topk_coef == 0:
            raise ValueError(f"teacher_topk {self.teacher_topk} with topk_coef 0: the teacher would return top-k "
                             "logprobs the loss never uses (set teacher_topk: 0 to turn the top-k term off)")
        return self


class VLLMSpec(StrictModel):
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


SpeculativeMode = Literal["off", "group", "auto"]  # generation.speculative (engines/hf_speculative.py)
SPECULATIVE_TAIL_DIVISOR = 4  # speculation runs while at most batch_size // 4 rows decode (engine and planner)


class GenerationSpec(StrictModel):
    engine: EngineName = Field("hf", json_schema_extra=choice_list(ENGINES))
    instances: int | None = Field(None, ge=1, le=1024, description="None: use the planner's suggestion")
    batch_size: int = Field(32, ge=1, le=4096, description="max concurrent sequences per instance")
    temperature: float = Field(1.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(64, ge=1, le=131_072)
    dtype: HFDtype = Field("float32", description="engine hf: weights and activations of generation (bfloat16: "
                           "faster on GPUs; the behaviour logprobs then differ from the float32 trainer's, see the "
                           "mismatch_* metrics and algorithm.is_mask); engine vllm: set vllm.dtype instead")
    stop: list[str] = Field(
        default_factory=list, max_length=MAX_STOP_STRINGS, description=f"up to {MAX_STOP_STRINGS} stop strings"
    )

    partial_rollouts: bool | None = Field(
        None,
        description="async mode: in-flight weight updates. true: an instance loads a new weights version between "
        "decode steps without dropping its batch; unfinished sequences continue on the new weights (keeping their KV "
        "cache), each token records the version that sampled it (Sample.version_marks), the loss corrects "
        "each token against its own behaviour logprob and max_staleness bounds the oldest token. false: a new "
        "version is loaded only when no sequence is in flight (the instance stops admitting until its batch "
        "drains), so every sample has one version. null (default): each engine's measured default, recorded in the "
        "job's events: vllm true (bench/modes.py --partial-rollouts --engine vllm, long-tail task, 2 CPU cores: "
        "1.33x the samples/s of draining at equal reward with max_staleness 2, 1.05-1.28x with max_staleness 1, "
        "where generation runs only one iteration ahead of the trainer), hf false (0.65-0.95x). LoRA jobs on vllm "
        "always drain (a request keeps the adapter version it was admitted with). Sync and colocated modes are "
        "unaffected.",
    )
    share: bool | None = Field(
        None,
        description="LoRA jobs: run on generation instances shared with other LoRA jobs on the same base model (one "
        "copy of the base weights, every job's adapter in the same batched forward; docs/operator.md#shared-"
        "generation-instances). null: share when the job can (training.lora, engine hf, not colocated, weight_sync "
        "shared_store or auto); false: the job's own instances; true: share, or refuse the job saying why it cannot.",
    )
    speculative: SpeculativeMode = Field(
        "auto",
        description="grouped speculative decoding (workers/generation/engines/hf_speculative.py): the samples of one "
        "prompt group are alike, so a suffix index over the group's prompt and responses proposes draft tokens for "
        "each running sequence and one forward pass verifies them. Greedy output is unchanged token for token, "
        "sampled output keeps the exact distribution (and a seeded request its tokens); behaviour logprobs are the "
        "target model's. off: never; group: while at most a quarter of the batch is still decoding (the long tail); "
        "auto (default): each engine's measured default (hf: group, paced so that a step that would not pay is a plain "
        "one: the tail decodes ~2x faster, jobs whose generation bounds the iteration gain 1.3-1.6x end to end, "
        "bench/speculative.py --e2e; vllm: off, it refuses group: its n-gram speculation returns wrong logprobs for "
        "accepted draft tokens when sampling).",
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
        if self.engine != "hf" and self.dtype != "float32":
            raise ValueError(f"dtype applies to engine 'hf' only; engine {self.engine!r}: set vllm.dtype")
        if self.engine != "vllm" and self.vllm != VLLMSpec():
            raise ValueError(f"`vllm` settings apply to engine 'vllm' only (this spec uses {self.engine!r})")
        if self.vllm.max_model_len is not None and self.vllm.max_model_len <= self.max_tokens:
            raise ValueError(f"vllm.max_model_len ({self.vllm.max_model_len}) must exceed max_tokens "
                             f"({self.max_tokens}): it holds the prompt and the response")
        if self.speculative == "group" and not ENGINES[self.engine].get("speculative"):
            raise ValueError(f"speculative: 'group' needs engine 'hf'; engine {self.engine!r} has no speculative "
                             "decoding that keeps the behaviour logprobs (docs/operator.md#speculative-decoding); "
                             "use 'auto' or 'off'")
        return self


class LoraSpec(StrictModel):
    """Train a low-rank adapter (peft LoRA) instead of every weight: only the adapter is trained, checkpointed and
    sent to the generation instances; the KL reference is the base model (the adapter disabled)."""

    rank: int = Field(16, ge=1, le=1024, description="rank r of each adapter's A (r x in) and B (out x r) matrices")
    alpha: float = Field(32.0, gt=0, le=1e6, description="scaling: the update is (alpha / rank) * B @ A")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input while training")
    target_modules: list[str] | None = Field(
        None, max_length=64, description="names (or name suffixes) of the linear layers to adapt, e.g. [\"q_proj\", "
        "\"v_proj\"]; None: every linear layer except the output head"
    )

    @field_validator("target_modules")
    @classmethod
    def _module_names(cls, names: list[str] | None) -> list[str] | None:
        if names is not None:
            if not names:
                raise ValueError("give at least one module name, or leave target_modules unset for all linear layers")
            for index, name in enumerate(names):
                if not re.fullmatch(r"[A-Za-z0-9_.]{1,200}", name):
                    raise ValueError(f"target_modules[{index}] {name!r} is not a module name (letters, digits, _ .)")
        return names


class TrainingSpec(StrictModel):
    devices: int = Field(1, ge=1, le=4096)
    iterations: int = Field(20, ge=1, le=1_000_000, description="optimiser steps (one per iteration)")
    prompts_per_iteration: int = Field(16, ge=1, le=1_000_000)
    micro_batch_size: int = Field(16, ge=1, le=65_536, description="samples per micro-step (gradient accumulation)")
    max_tokens_per_micro_batch: int | None = Field(
        None, ge=0, le=16_777_216, description="padded-token budget of a forward pass: micro-batches are cut in "
        "length order so rows x longest sequence stays within it (a longer sequence runs alone); same gradient, "
        "less compute on padding. None: chosen at job start from the model's size and the device's free memory "
        "(recorded in the job's events; off where the algorithm or multi-device training cannot use it); 0: off, "
        "cut by micro_batch_size only"
    )
    bf16_autocast: bool | None = Field(None, description="run forward passes under bfloat16 autocast (weights, "
                                       "gradients and optimizer state stay float32). None: on where it is faster "
                                       "(a GPU with bfloat16 support), off on CPUs (recorded in the job's events)")
    torch_compile: bool = Field(False, description="torch.compile the policy (dynamic shapes); the first steps pay "
                                "the compilation")
    lr: float = Field(1e-4, gt=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    weight_sync: WeightSyncBackend = Field("shared_store", description="how new weights reach the generation "
                                           "instances: p2p (torch.distributed, trainer to each instance), shared_store "
                                           "(safetensors on the artifact store) or auto (p2p where an instance can "
                                           "reach the trainer, else the shared store)")
    lora: LoraSpec | None = Field(None, description="train a LoRA adapter instead of the full model; None: full "
                                  "fine-tuning", json_schema_extra=form_defaults.schema_extra())
    eval_every: int = Field(5, ge=0, le=1_000_000, description="held-out reward (one sample per eval prompt, at the "
                            "current weights) every N iterations and after the last; 0: never")
    share: bool = Field(False, description="LoRA jobs: train in one process shared with other sharing LoRA jobs on "
                        "the same base model (one copy of the base model and one training slot for up to "
                        "STREAMRL_SHARED_TRAINING_JOBS jobs, each with its own adapter, optimizer and checkpoints; "
                        "docs/operator.md#shared-training-processes). The jobs then split that slot's devices, so "
                        "share to save memory and slots, not for speed. true: share, or refuse the job saying why "
                        "it cannot")


    @field_validator("weight_sync", mode="before")
    @classmethod
    def _old_weight_sync(cls, value: Any) -> Any:
        """Specs stored before p2p existed may say `broadcast` (the runtime ran them on the shared store): they run
        as `auto`, which is that plus p2p where the trainer is reachable."""
        return "auto" if value == "broadcast" else value


class JobSpec(StrictModel):
    """One RL job. Defaults give a small, sane GRPO run."""

    name: str = Field("job", min_length=1, max_length=200)
    model: str = Field(
        ..., min_length=1, max_length=1000, description="registered model name (or path for train-local)"
    )
    tokenizer: str | None = Field(None, max_length=1000, description="defaults to the model's own tokenizer")
    dataset: DatasetSpec
    reward: RewardSpec = Field(default_factory=RewardSpec)
    environment: EnvironmentSpec | None = Field(None, description="multi-turn episodes with an environment (tools, "
                                                "feedback); None: one prompt, one completion, scored by `reward`")
    agent: AgentSpec | None = Field(None, description="environment.type 'gateway': the agent that drives the "
                                    "episodes, your `code` in the jail or a service at `url`; None: agents claim "
                                    "episodes through POST /jobs/{id}/rollouts/claim")
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    mode: Mode = Field("sync", json_schema_extra=choice_list(MODES))
    max_staleness: int = Field(1, ge=1, le=64, description="async: max policy versions a sample may lag")
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    dispatch: DispatchSpec = Field(default_factory=DispatchSpec)
    autoscale: AutoscaleSpec = Field(default_factory=AutoscaleSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    evaluation: list[EvalSuiteSpec] = Field(default_factory=list, max_length=16, description="evaluation suites "
                                            "run on checkpoints every evaluation_every iterations and after the "
                                            "last, on generation slots, while training goes on")
    evaluation_every: int = Field(0, ge=0, le=1_000_000, description="evaluate every N iterations (rounded up to a "
                                  "checkpoint: an evaluation runs on the checkpoint saved then); 0: after the last "
                                  "iteration only")
    failover: FailoverSpec = Field(default_factory=FailoverSpec)
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec, description="device-seconds and tokens the job may use; "
                               "at 100% it pauses at a checkpoint until a limit is raised")
    priority: Priority = Field("normal", json_schema_extra=choice_list(PRIORITIES),
                               description="scheduling class: the queue orders by it first; at most the team's "
                               "max_priority quota")
    preemptible: bool = Field(True, description="the scheduler may hand the job back at a checkpoint for a "
                              "higher-priority or under-share job (it resumes from there); false: team admins only")
    seed: int = Field(0, ge=0, le=MAX_SEED)

    @model_validator(mode="after")
    def _evaluation_consistent(self) -> JobSpec:
        names = [suite.name for suite in self.evaluation]
        if len(set(names)) != len(names):
            raise ValueError(f"evaluation: suite names must be unique (got {names})")
        for index, suite in enumerate(self.evaluation):
            if suite.scorer is None and self.grading is None:
                raise ValueError(f"evaluation[{index}]: give reward or grader (the job has no reward to reuse)")
        if self.checkpoint.select == "best":
            suite_name, _, stat = self.checkpoint.metric.partition("/")
            if suite_name not in names:
                raise ValueError(f"checkpoint.metric {self.checkpoint.metric!r} names no evaluation suite "
                                 f"(suites: {names or 'none'}); select: best needs one")
        return self

    @model_validator(mode="after")
    def _weight_sync_needs_instances(self) -> JobSpec:
        if self.mode == "colocated" and self.training.weight_sync == "p2p":
            raise ValueError("training.weight_sync 'p2p' sends weights to separate generation instances; colocated "
                             "mode generates in the trainer's process: use shared_store or auto")
        return self

    @model_validator(mode="after")
    def _gateway_needs_instances(self) -> JobSpec:
        if self.environment is not None and self.environment.type in THROUGH_GATEWAY and \
                self.mode not in ("sync", "async"):
            raise ValueError(f"environment.type {self.environment.type!r} serves its episodes from generation "
                             f"instances: mode must be sync or async (got {self.mode!r})")
        return self

    @model_validator(mode="after")
    def _agent_needs_gateway(self) -> JobSpec:
        if self.agent is not None and (self.environment is None or self.environment.type != GATEWAY):
            raise ValueError("agent: an agent drives the episodes of environment.type 'gateway' (set environment: "
                             "{type: gateway})")
        return self

    @model_validator(mode="after")
    def _one_source_of_reward(self) -> JobSpec:
        if self.environment is not None and self.reward != RewardSpec():
            raise ValueError(f"reward: a {self.reward.type!r} reward of one completion does not apply with "
                             "`environment`: leave `reward` unset; `environment.grader` grades the final answer")
        return self

    @property
    def grading(self) -> tuple[RewardSpec, tuple[str, ...]] | None:
        """The reward that scores text in this job, and its place in the spec: `reward` (each completion) for a
        single-turn job, `environment.grader` (each episode's final answer) for an environment job; None: an
        environment job whose reward is its steps' alone."""
        if self.environment is None:
            return self.reward, ("reward",)
        if self.environment.grader is None:
            return None
        return self.environment.grader, ("environment", "grader")

    @property
    def share_refusal(self) -> str | None:
        """Why this job cannot run on shared generation instances; None: it can."""
        return sharing.share_refusal(lora=self.training.lora is not None, engine=self.generation.engine, mode=self.mode,
                             weight_sync=self.training.weight_sync)

    @property
    def share_settings(self) -> str:  # what the jobs on one shared generation process agree on (contract/sharing.py)
        return sharing.share_settings(engine=self.generation.engine, vllm=self.generation.vllm.model_dump(mode="json"),
                                      lora_rank=self.training.lora.rank if self.training.lora else None,
                                      speculative=self.generation.speculative)

    @property
    def training_share_refusal(self) -> str | None:
        """Why this job cannot train in a shared process; None: it can."""
        return sharing.training_share_refusal(lora=self.training.lora is not None, mode=self.mode,
                                              devices=self.training.devices, weight_sync=self.training.weight_sync)

    @property
    def shares_training(self) -> bool:
        """The controller places this job's driver on the shared training process of its base model."""
        return self.training.share and self.training_share_refusal is None

    @property
    def shares_generation(self) -> bool:
        """The controller places this job's instances on shared ones (and its weights go through the store)."""
        return self.generation.share is not False and self.share_refusal is None

    @model_validator(mode="after")
    def _share_when_asked(self) -> JobSpec:
        for asked, refusal, what, loc in (
            (self.generation.share, self.share_refusal, "share generation instances", ("generation", "share")),
            (self.training.share, self.training_share_refusal, "share a training process", ("training", "share")),
        ):
            if asked and refusal is not None:  # an error AT the field (forms show it there)
                raise ValidationError.from_exception_data("JobSpec", [InitErrorDetails(
                    type=PydanticCustomError("value_error", "the job cannot {what}: {why}",
                                             {"what": what, "why": refusal}), loc=loc, input=True)])
        return self

    @model_validator(mode="after")
    def _lora_fits_the_engine(self) -> JobSpec:
        lora = self.training.lora
        if lora is not None and self.generation.engine == "vllm":
            sharing.vllm_lora_rank(lora.rank)  # raises naming the largest rank vLLM serves: lower it or use 'hf'
        return self

    @model_validator(mode="after")
    def _budget_keeps_the_loss_exact(self) -> JobSpec:
        conflict = ALGORITHMS[self.algorithm.name].get("token_budget_conflict")
        if self.training.max_tokens_per_micro_batch and conflict:
            raise ValueError(f"training.max_tokens_per_micro_batch cannot be used with {self.algorithm.name}: "
                             f"{conflict}")
        if self.training.max_tokens_per_micro_batch and self.training.devices > 1:
            # each rank would cut its share into its own number of passes, and FSDP's collectives run per pass
            raise ValueError("training.max_tokens_per_micro_batch is not supported with training.devices > 1 yet "
                             "(every rank must run the same number of forward/backward passes)")
        return self

