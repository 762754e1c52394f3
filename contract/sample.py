"""`PromptRequest` (one sample to generate, driver -> instance) and `Sample` (one finished generation, instance ->
trainer): the two units that stream between the processes (docs/architecture.md, "Data flow")."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Sample:
    job_id: int
    prompt_id: str  # stable across epochs: the ranker keys on it
    group_id: str  # (iteration, prompt): the unit GRPO normalises over
    sample_id: str  # unique; consumption is idempotent on it
    policy_version: int  # weights version that generated it (behaviour policy)
    prompt_ids: list[int]
    response_ids: list[int]
    behaviour_logprobs: list[float]  # len == len(response_ids)
    finish_reason: str  # "stop" | "length" | "error"
    prompt_text: str = ""
    response_text: str = ""
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    reward_error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # dataset row extras (answer, ...)
    queued_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    instance_id: str = ""

    def __post_init__(self) -> None:
        assert len(self.behaviour_logprobs) == len(self.response_ids), "one behaviour logprob per response token"

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Sample:
        return cls(**json.loads(raw))


@dataclass
class PromptRequest:
    """One sample to generate: the dispatcher writes these to an instance's prompt stream."""

    sample_id: str
    group_id: str
    prompt_id: str
    iteration: int
    prompt_ids: list[int]
    prompt_text: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    predicted_len: float = 0.0  # the instance serves longest-predicted first
    min_version: int = 0  # the instance loads weights at least this new before generating it
    seed: int | None = None
    queued_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> PromptRequest:
        return cls(**json.loads(raw))
