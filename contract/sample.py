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
    policy_version: int  # weights version that generated it (behaviour policy); the oldest one when several did
    prompt_ids: list[int]
    response_ids: list[int]
    behaviour_logprobs: list[float]  # len == len(response_ids)
    finish_reason: str  # "stop" | "length" | "error"
    prompt_text: str = ""  # as the engine saw it (a chat prompt: rendered with the model's chat template)
    response_text: str = ""
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    reward_error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # dataset row extras (answer, ...)
    queued_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    instance_id: str = ""
    truncated: bool = False  # cut by max_tokens (or the context length) before an EOS id or a stop string
    # multi-turn episodes (workers/core/episode.py; single-turn samples leave these at their defaults):
    loss_mask: list[int] | None = None  # per response token: 1 = the policy's own (trained), 0 = environment/tool
    #                                     tokens and chat markup the policy did not generate (context); None: all 1
    turns: int = 0  # policy turns of the episode (0: a single-turn sample)
    turn_spans: list[list[int]] | None = None  # [start, end) of each policy turn in response_ids
    turn_rewards: list[float | None] | None = None  # each step()'s reward (the sample's reward is their sum)
    messages: list[dict[str, Any]] | None = None  # the conversation: opening turns, the policy's, the environment's
    episode_end: str | None = None  # "done" | "max_turns" | "max_episode_tokens" | "error"
    segments: list[dict[str, Any]] | None = None  # runs of the loss mask: [{start, end, trained, text}] (decoded)
    # in-flight weight updates (contract/version_marks.py): [[token_index, version], ...] when the response's tokens
    # were sampled by more than one weights version (the first mark is policy_version); None: all by policy_version
    version_marks: list[list[int]] | None = None
    # grouped speculative decoding (engines/hf_speculative.py): forward passes that emitted the response (0: not
    # recorded), draft tokens verified and accepted, passes that verified drafts
    forward_passes: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    speculative_passes: int = 0
    # on-policy distillation (algorithm.teacher): log pi_teacher of each response token, scored on the instance
    # (workers/runtime/teacher.py); None: no teacher (older payloads lack the field and read as None)
    teacher_logprobs: list[float] | None = None
    # multi-turn episodes: policy turns cut at generation.max_tokens (finish "length"); 0 for single-turn samples
    # (whose cut is `truncated`) and for older payloads
    turns_truncated: int = 0
    # gateway episodes (workers/core/gateway.py): the policy version of each policy turn (one recorded chat call);
    # None: not recorded (built-in episodes, whose per-token versions are `version_marks`)
    turn_versions: list[int] | None = None
    # on-policy distillation with algorithm.teacher_topk = k: per response token, the teacher's k most likely ids and
    # their logprobs at that position, [[ids], [logprobs]] (the top-k entry of workers/runtime/inference.py; [[], []]
    # where the loss does not train); None: not scored (teacher_topk 0, and older payloads)
    teacher_topk: list[list[Any]] | None = None

    def __post_init__(self) -> None:
        assert len(self.behaviour_logprobs) == len(self.response_ids), "one behaviour logprob per response token"
        assert self.loss_mask is None or len(self.loss_mask) == len(self.response_ids), "one mask entry per token"
        assert self.teacher_logprobs is None or len(self.teacher_logprobs) == len(self.response_ids), \
            "one teacher logprob per response token"
        assert self.teacher_topk is None or len(self.teacher_topk) == len(self.response_ids), \
            "one teacher top-k entry per response token"
        assert self.version_marks is None or (self.version_marks[0][0] == 0 and self.policy_version == min(
            v for _, v in self.version_marks)), "version marks start at token 0; policy_version is the oldest"

    @property
    def trained_tokens(self) -> int:
        """Response tokens the loss sees (the policy's own)."""
        return len(self.response_ids) if self.loss_mask is None else sum(self.loss_mask)

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
