"""Schemas of the same prompt's samples side by side across runs and checkpoints (`/samples/...`)."""

from __future__ import annotations

from pydantic import BaseModel

from backend.schemas.jobs import SamplePublic


class PromptSummary(BaseModel):
    prompt: str
    runs: int  # how many of the asked jobs have samples of it
    iterations: int  # (job, iteration) pairs with samples of it
    samples: int


class PromptsPublic(BaseModel):
    data: list[PromptSummary]  # most runs first, then most iterations
    count: int


class IterationSamples(BaseModel):
    iteration: int
    checkpoint: bool  # a checkpoint was saved at this iteration
    reward_mean: float | None  # of these samples (reward errors left out)
    samples: list[SamplePublic]


class RunSamples(BaseModel):
    job_id: int
    name: str
    iterations: list[IterationSamples]  # oldest first


class PromptSamplesPublic(BaseModel):
    prompt: str
    runs: list[RunSamples]  # in the order the jobs were asked for
    count: int  # samples in all
