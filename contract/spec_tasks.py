"""The task parts of a JobSpec: where prompts come from (DatasetSpec), how samples are scored (RewardSpec) and the
evaluation suites built from both (EvalSuiteSpec). contract/spec.py composes them into JobSpec and re-exports them."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from contract.catalog import REWARD_TYPES
from contract.spec_base import StrictModel, check_json_value, choice_list

BuiltinTask = Literal["arithmetic", "long_tail"]
MAX_PARAMS_BYTES = 16 * 1024  # reward.params as JSON: specs are stored per job and listed by GET /jobs


class DatasetSpec(StrictModel):
    """Where prompts come from: exactly one of an uploaded dataset, a local JSONL path or a built-in task.

    Rows are JSON objects with `prompt` (text, or chat messages) or `messages` (OpenAI chat format: the prompt is the
    conversation up to the final assistant turn); `answer` and any other keys are passed to the reward
    (contract/prompt_rows.py). Chat prompts are rendered with the model's chat template.
    """

    id: int | None = Field(None, ge=1, le=2**31 - 1, description="id of a dataset uploaded to the control plane")
    path: str | None = Field(None, max_length=4096, description="local JSONL file (train-local only)")
    builtin: BuiltinTask | None = Field(None, description="generate prompts from a built-in task")
    num_prompts: int = Field(256, ge=1, le=1_000_000, description="prompts to generate for a built-in task")
    eval_prompts: int = Field(64, ge=0, le=100_000, description="held-out prompts for evaluation")
    system_prompt: str | None = Field(None, max_length=20_000, description="system turn for chat prompts that have "
                                      "none of their own (neither a system message nor a `system` column)")

    @model_validator(mode="after")
    def _exactly_one_source(self) -> DatasetSpec:
        given = [name for name in ("id", "path", "builtin") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of id, path, builtin (got {given or 'none'})")
        return self


class RewardSpec(StrictModel):
    """A reward: a built-in by `type` with `params`, a weighted `composite` of `components`, or sandboxed `python` code.

    User code defines `def reward(prompt: str, response: str, meta: dict) -> float | dict`.
    """

    type: str = Field(
        "exact_match", min_length=1, max_length=100,
        description="built-in name, grader (string_check, text_similarity, multi), 'composite' or 'python'",
        json_schema_extra=choice_list(REWARD_TYPES),
    )
    params: dict[str, Any] = Field(default_factory=dict, description=f"at most {MAX_PARAMS_BYTES} bytes as JSON")
    weight: float = Field(1.0, ge=-1e6, le=1e6)
    components: list[RewardSpec] = Field(default_factory=list, max_length=32)
    code: str | None = Field(None, max_length=100_000)

    @field_validator("params")
    @classmethod
    def _params_bounded(cls, params: dict[str, Any]) -> dict[str, Any]:
        check_json_value(params, "params")
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


class EvalSamplingSpec(StrictModel):
    temperature: float = Field(1.0, ge=0, le=10, description="0: greedy")
    top_p: float = Field(1.0, gt=0, le=1)
    max_tokens: int = Field(64, ge=1, le=131_072)


class EvalSuiteSpec(StrictModel):
    """One evaluation suite (docs/user-guide.md#evaluation-suites): every prompt of `dataset`'s eval split (a built-in
    task's `eval_prompts` rows, a file's last `eval_prompts` rows, or all of an uploaded dataset's rows when it has no
    more than `eval_prompts`) sampled `samples_per_prompt` times and scored by `reward` (or `grader`: the same
    vocabulary, a grader type). A sample passes when its score is >= `pass_threshold`; pass@k uses the unbiased
    estimator 1 - C(n-c, k)/C(n, k) (contract/evaluation.py)."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="letters, digits, _ . - (metric names "
                      "are <name>/mean, <name>/pass@1, <name>/pass@k)")
    dataset: DatasetSpec
    reward: RewardSpec | None = Field(None, description="how a sample is scored; None with no grader: the job's reward")
    grader: RewardSpec | None = Field(None, description="a grader (string_check, text_similarity, python, multi...) "
                                      "instead of reward")
    samples_per_prompt: int = Field(1, ge=1, le=128)
    k: int | None = Field(None, ge=1, le=128, description="pass@k's k; None: samples_per_prompt")
    pass_threshold: float = Field(1.0, description="a sample with score >= this passes (pass@1, pass@k)")
    sampling: EvalSamplingSpec = Field(default_factory=EvalSamplingSpec)

    @model_validator(mode="after")
    def _one_scorer(self) -> EvalSuiteSpec:
        if self.reward is not None and self.grader is not None:
            raise ValueError("give reward or grader, not both")
        if self.k is not None and self.k > self.samples_per_prompt:
            raise ValueError(f"k ({self.k}) must be at most samples_per_prompt ({self.samples_per_prompt})")
        return self

    @property
    def scorer(self) -> RewardSpec | None:
        return self.grader if self.grader is not None else self.reward

    @property
    def pass_k(self) -> int:
        return self.k or self.samples_per_prompt
