"""The verbs of one RL iteration -- generate, score, train, sync weights, evaluate -- as plain functions.

`train-local` strings them together in one process; the distributed runtime calls the same functions from its
Celery tasks, so both agree on ids, tokenisation, grouping and what a `Sample` holds.
Ids: prompt_id = the dataset row's "prompt_id" (or "p<index>"); group_id = "<iteration>:<prompt_id>";
sample_id = "<group_id>:<k>" for the k-th of `group_size` samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.sample import Sample
from contract.spec import GenerationSpec
from workers.generation.engine import GenerationEngine, GenerationRequest, SamplingParams
from workers.rewards import Reward
from workers.training.algorithms import Metrics
from workers.training.trainer import Trainer


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    text: str
    ids: list[int]  # tokenizer(text)["input_ids"], <bos> first -- the same encoding SFT trains on
    row: dict[str, Any]  # the dataset row: passed to the reward as `meta`


def make_prompts(rows: Sequence[dict[str, Any]], tokenizer: Any) -> list[Prompt]:
    prompts = []
    for index, row in enumerate(rows):
        if "prompt" not in row:
            raise ValueError(f"dataset row {index} has no 'prompt' field")
        text = str(row["prompt"])
        prompt_id = str(row.get("prompt_id", f"p{index}"))
        prompts.append(Prompt(prompt_id, text, list(tokenizer(text)["input_ids"]), dict(row)))
    return prompts


def sampling_params(spec: GenerationSpec, seed: int | None = None) -> SamplingParams:
    return SamplingParams(spec.temperature, spec.top_p, spec.max_tokens, tuple(spec.stop), seed)


def build_requests(prompts: Iterable[Prompt], iteration: int, group_size: int,
                   sampling: SamplingParams) -> list[GenerationRequest]:
    """`group_size` requests per prompt; `meta` carries what `to_samples` needs to rebuild the group."""
    requests = []
    for index, prompt in enumerate(prompts):
        group_id = f"{iteration}:{prompt.prompt_id}"
        for k in range(group_size):
            params = sampling if sampling.seed is None else SamplingParams(  # one independent seed per request
                sampling.temperature, sampling.top_p, sampling.max_tokens, sampling.stop,
                sampling.seed + index * group_size + k)
            meta = {"prompt": prompt, "group_id": group_id, "queued_at": time.time()}
            requests.append(GenerationRequest(f"{group_id}:{k}", prompt.ids, params, meta))
    return requests


def generate(engine: GenerationEngine, requests: list[GenerationRequest], job_id: int = 0,
             instance_id: str = "local") -> list[Sample]:
    """Run every request through the engine; samples come back in finish order (streamed)."""
    samples = []
    for result in engine.generate_stream(requests):
        prompt: Prompt = result.meta["prompt"]
        samples.append(Sample(
            job_id=job_id, prompt_id=prompt.prompt_id, group_id=result.meta["group_id"], sample_id=result.request_id,
            policy_version=engine.version, prompt_ids=list(result.prompt_ids), response_ids=list(result.response_ids),
            behaviour_logprobs=list(result.logprobs), finish_reason=result.finish_reason, prompt_text=prompt.text,
            response_text=result.text, meta=prompt.row, queued_at=result.meta["queued_at"],
            started_at=result.started_at, finished_at=result.finished_at, instance_id=instance_id,
        ))
    return samples


def score(reward: Reward, samples: list[Sample]) -> list[Sample]:
    """Fill reward, components and error of each sample in place (a broken reward gives 0.0 and an error)."""
    outcomes = reward.score_many((s.prompt_text, s.response_text, s.meta) for s in samples)
    for sample, outcome in zip(samples, outcomes, strict=True):
        sample.reward, sample.reward_components, sample.reward_error = outcome.value, outcome.components, outcome.error
    return samples


def train(trainer: Trainer, samples: list[Sample]) -> Metrics:
    """One optimizer step on complete groups (advantages per group, micro-batches, AdamW)."""
    return trainer.train_iteration(samples)


def sync_weights(trainer: Trainer, engine: GenerationEngine, directory: str | Path) -> float:
    """Export the trainer's weights (HF dir) and load them into the engine as `trainer.version`; returns seconds."""
    start = time.perf_counter()
    engine.update_weights(trainer.version, trainer.export_weights(directory))
    return time.perf_counter() - start


def evaluate(engine: GenerationEngine, reward: Reward, prompts: Sequence[Prompt], sampling: SamplingParams) -> float:
    """Mean reward of one sample per held-out prompt (seeded sampling: the same draws every evaluation)."""
    if not prompts:
        return float("nan")
    samples = score(reward, generate(engine, build_requests(prompts, -1, 1, sampling)))
    return statistics.fmean(s.reward for s in samples)
