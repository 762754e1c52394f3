"""From requests to scored `Sample`s: single-turn completions (an engine result and a reward outcome), built by the one
constructor of every producer (workers/core/sample.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from contract.sample import PromptRequest, Sample
from contract.spec import GenerationSpec
from workers.core.sample import build_sample
from workers.generation.engine import GenerationEngine, GenerationRequest, GenerationResult, SamplingParams
from workers.rewards import Reward, RewardOutcome


def sampling_params(spec: GenerationSpec) -> SamplingParams:
    return SamplingParams(temperature=spec.temperature, top_p=spec.top_p, max_tokens=spec.max_tokens,
                          stop=tuple(spec.stop))


def generation_request(request: PromptRequest, sampling: SamplingParams) -> GenerationRequest:
    """The engine's view of a request: its own sampling seed, so any instance produces the same sample."""
    return GenerationRequest(request_id=request.sample_id, prompt_ids=request.prompt_ids, meta=request.meta,
                             sampling=dataclasses.replace(sampling, seed=request.seed))


def to_sample(request: PromptRequest, result: GenerationResult, outcome: RewardOutcome, *, job_id: int,
              version: int, instance_id: str) -> Sample:
    """A completion as a Sample (`build_sample`): every response token is the policy's; `version`: the weights the
    request was admitted under, unless the engine recorded which versions sampled its tokens."""
    return build_sample(
        request, job_id=job_id, instance_id=instance_id, prompt_ids=result.prompt_ids,
        response_ids=result.response_ids, logprobs=result.logprobs, loss_mask=None, version=version,
        marks=result.version_marks, reward=outcome, finish_reason=result.finish_reason,
        prompt_text=request.prompt_text, response_text=result.text, started_at=result.started_at,
        finished_at=result.finished_at, truncated=result.finish_reason == "length",
        forward_passes=result.forward_passes, draft_tokens=result.draft_tokens,
        accepted_tokens=result.accepted_tokens, speculative_passes=result.speculative_passes,
    )


def rollout(engine: GenerationEngine, reward: Reward, requests: Iterable[PromptRequest], sampling: SamplingParams, *,
            job_id: int, instance_id: str) -> list[Sample]:
    """Generate every request in one continuous batch, score each as it finishes; samples in finish order."""
    by_id = {r.sample_id: r for r in requests}
    results = list(engine.generate_stream(generation_request(r, sampling) for r in by_id.values()))
    outcomes = reward.score_many((by_id[r.request_id].prompt_text, r.text, by_id[r.request_id].meta) for r in results)
    return [to_sample(by_id[r.request_id], r, o, job_id=job_id, version=engine.version, instance_id=instance_id)
            for r, o in zip(results, outcomes, strict=True)]


def flatten(groups: Sequence[Sequence[PromptRequest]]) -> list[PromptRequest]:
    return [r for group in groups for r in group]
