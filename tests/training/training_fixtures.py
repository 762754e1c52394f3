"""Helpers shared by the trainer tests: a small JobSpec and synthetic scored groups."""

from __future__ import annotations

import random

from contract.sample import Sample
from contract.spec import JobSpec


def make_spec(**algorithm: object) -> JobSpec:
    return JobSpec.model_validate(
        {
            "model": "tiny",
            "dataset": {"builtin": "arithmetic"},
            "algorithm": {"group_size": 4, **algorithm},
            "training": {"lr": 1e-3, "micro_batch_size": 3},
            "generation": {"temperature": 1.0},
        }
    )


def make_group(group_id: str, rewards: list[float], seed: int, vocab: int = 90) -> list[Sample]:
    """Samples of one prompt with random tokens and noisy behaviour logprobs (so ratios differ from 1)."""
    rng = random.Random(seed)
    prompt = [1] + [rng.randrange(4, vocab) for _ in range(rng.randint(2, 6))]
    group = []
    for index, reward in enumerate(rewards):
        length = rng.randint(1, 7)
        group.append(
            Sample(
                job_id=1,
                prompt_id=group_id,
                group_id=group_id,
                sample_id=f"{group_id}-{index}",
                policy_version=0,
                prompt_ids=prompt,
                response_ids=[rng.randrange(4, vocab) for _ in range(length)],
                behaviour_logprobs=[-4.5 + rng.uniform(-0.6, 0.6) for _ in range(length)],
                finish_reason="stop",
                reward=reward,
            )
        )
    return group
