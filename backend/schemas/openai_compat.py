"""Request bodies of the OpenAI-compatible fine-tuning API (`/openai/v1`, backend/api/routes/openai_compat.py), in
OpenAI's field names (the `openai` SDK's `fine_tuning.jobs.create` parameters). Unknown fields are errors, so a
parameter the platform does not honour is refused, never silently dropped (docs/openai.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from contract.spec import MAX_SEED

Auto = Literal["auto"]
PositiveInt = Annotated[StrictInt, Field(ge=1, le=1_000_000)]
PositiveFloat = Annotated[StrictFloat | StrictInt, Field(gt=0, le=1e6)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ReinforcementHyperparameters(_Request):
    """OpenAI's reinforcement hyperparameters; `auto` (or absent) takes the platform's choice."""

    batch_size: Auto | PositiveInt | None = None
    compute_multiplier: Auto | PositiveFloat | None = None
    eval_interval: Auto | Annotated[StrictInt, Field(ge=0, le=1_000_000)] | None = None
    eval_samples: Auto | Annotated[StrictInt, Field(ge=0, le=100_000)] | None = None
    learning_rate_multiplier: Auto | PositiveFloat | None = None
    n_epochs: Auto | Annotated[StrictInt, Field(ge=1, le=1000)] | None = None
    reasoning_effort: Literal["default", "low", "medium", "high"] | None = None


class ReinforcementMethod(_Request):
    grader: dict[str, Any]
    hyperparameters: ReinforcementHyperparameters | None = None


class Method(_Request):
    type: Literal["supervised", "dpo", "reinforcement"]
    supervised: dict[str, Any] | None = None
    dpo: dict[str, Any] | None = None
    reinforcement: ReinforcementMethod | None = None


class FineTuningJobCreate(_Request):
    """`POST /openai/v1/fine_tuning/jobs`. `platform_spec` is this platform's extension (the SDK sends it with
    `extra_body`): JobSpec fields (contract/spec.py) the OpenAI parameters do not reach, e.g.
    `generation.max_tokens`."""

    model: str = Field(min_length=1, max_length=200)
    training_file: str = Field(min_length=1, max_length=64)
    validation_file: str | None = Field(None, max_length=64)
    method: Method | None = None
    hyperparameters: dict[str, Any] | None = None  # OpenAI's deprecated top-level form (supervised only)
    suffix: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: StrictInt | None = Field(None, ge=0, le=MAX_SEED)
    metadata: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]] | None = Field(
        None, max_length=16)
    integrations: list[Any] | None = None
    platform_spec: dict[str, Any] | None = None
