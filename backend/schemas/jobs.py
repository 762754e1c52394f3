"""Schemas for jobs and what they record. `JobCreate` is the shared `JobSpec`."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.db.enums import JobStatus
from backend.schemas.common import ORMModel, Page, RequestModel, UtcDatetime
from backend.schemas.queue import QueuePublic
from contract.spec import JobSpec
from contract.spec_operations import LimitsSpec

JobCreate = JobSpec


class Progress(BaseModel):
    iteration: int
    total_iterations: int


class JobPublic(BaseModel):
    id: int
    name: str
    status: JobStatus
    spec: dict[str, Any]
    target_instances: int
    running_instances: int = Field(description="generation instances heart-beating now (pending and silent ones "
                                   "are not running)")
    pending_instances: int = Field(description="instances asked for that no generation worker picked up yet")
    shared_generation: bool = Field(False, description="the job's generation instances run on shared ones (LoRA jobs "
                                    "on one base model in one process and one batch; spec generation.share)")
    shared_training: bool = Field(False, description="the job's driver runs in a shared training process (LoRA jobs on "
                                  "one base model in one process and one training slot; spec training.share)")
    autoscale: bool
    created_by: int | None
    created_by_email: str | None
    created_at: UtcDatetime
    started_at: UtcDatetime | None
    finished_at: UtcDatetime | None
    error: str | None
    progress: Progress
    latest_metrics: dict[str, Any] | None
    ptl_profile: dict[str, Any] | None
    tags: list[str]  # sorted, unique
    notes: str
    parent_job_id: int | None = Field(None, description="a fork's parent job (POST /jobs/{id}/fork); null otherwise")
    parent_iteration: int | None = Field(None, description="the parent's checkpoint iteration a fork starts from")
    queue: QueuePublic | None = Field(None, description="a queued job's place in the scheduler's queue and why it "
                                      "waits; null otherwise")


JobsPublic = Page[JobPublic]

TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,39}$"  # no quotes or commas: see models.Job.tags
MAX_TAGS = 20
MAX_NOTES = 10_000
Tag = Annotated[str, Field(pattern=TAG_PATTERN, description="letters, digits and _ . : = + - (at most 40)")]


class JobAnnotate(RequestModel):
    """Edit a job's tags and notes: `tags` replaces the list, or `add_tags` / `remove_tags` change it (not both
    ways at once); `notes` replaces the notes ("" clears them)."""

    model_config = ConfigDict(extra="forbid")

    tags: list[Tag] | None = Field(None, max_length=MAX_TAGS)
    add_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    remove_tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    notes: str | None = Field(None, max_length=MAX_NOTES)
    limits: LimitsSpec | None = Field(None, description="replace the job's `limits` (a paused job with room resumes)")

    @property
    def has_annotation(self) -> bool:
        return self.tags is not None or bool(self.add_tags or self.remove_tags) or self.notes is not None

    @model_validator(mode="after")
    def _something_to_do(self) -> JobAnnotate:
        if not self.has_annotation and self.limits is None:
            raise ValueError("give tags, add_tags, remove_tags, notes or limits")
        if self.tags is not None and (self.add_tags or self.remove_tags):
            raise ValueError("tags replaces the whole list: give it alone, or use add_tags / remove_tags")
        return self


class JobFork(RequestModel):
    """Start a new job from one of this job's checkpoints with changed settings."""

    iteration: int = Field(ge=0, description="the parent's checkpoint iteration to start from "
                           "(GET /jobs/{id}/checkpoints)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="spec changes: dotted keys "
                                      "(`training.lr`: 1e-5) or nested mappings (`{\"reward\": {...}}`); a mapping "
                                      "replaces a field whole only under a dotted key naming it; `name` renames")


class JobScale(RequestModel):
    target_instances: int | None = Field(None, ge=1, le=1024)
    autoscale: bool | None = None


class JobEventPublic(ORMModel):
    id: int
    kind: str
    message: str
    data: dict[str, Any] | None
    created_at: UtcDatetime


class IterationPublic(ORMModel):
    iteration: int
    metrics: dict[str, Any]
    created_at: UtcDatetime


class SamplePublic(ORMModel):
    sample_id: str
    iteration: int
    prompt: str
    response: str
    reward: float
    length: int
    policy_version: int
    instance_id: str
    reward_components: dict[str, float] | None = None
    reward_error: str | None = None
    truncated: bool = False  # cut by max_tokens before an EOS id or a stop string
    # multi-turn episodes: turns, end, turn_rewards, turn_spans, messages, trained_tokens, context_tokens and
    # segments ([{start, end, trained, text}]: the response cut into the policy's tokens and the environment's)
    episode: dict[str, Any] | None = None
    mismatch: float | None = None  # mean k3 (trainer vs behaviour logprobs) over the sample's on-policy tokens


class SampleTokensPublic(BaseModel):
    """The trajectory explorer's per-token record of one stored sample (all lists have one entry per response token):
    `current` is the trainer's logprob at the step that trained the sample (version `trained_version`)."""

    sample_id: str
    iteration: int
    pieces: list[str]
    behaviour: list[float]
    current: list[float]
    versions: list[list[int]]  # version marks: [[token_index, version], ...] (token i: the last mark at or before i)
    trained_version: int
    advantage: float
    loss_mask: list[int] | None = None  # None: every token trained
    reward: float
    reward_components: dict[str, float] | None = None
    mismatch: float | None = None


class SpanPublic(ORMModel):
    lane: str
    kind: str
    start: float
    end: float


class TimelinePublic(BaseModel):
    spans: list[SpanPublic]


class CheckpointPublic(ORMModel):
    iteration: int
    path: str
    created_at: UtcDatetime
    scores: dict[str, dict[str, float]] = Field(default_factory=dict, description="evaluation suite -> its summary "
                                                 "(mean, pass@1, pass@k...) on this checkpoint")
    best: bool = Field(False, description="the job's best checkpoint by checkpoint.metric (checkpoint.select best)")
