"""`build_sample`: the one constructor of a `Sample`, for every producer.

    single-turn completion   workers/core/rollout.py `to_sample`        (engine result + reward outcome)
    built-in episode         workers/core/episode.py `episode_sample`   (turns, environment steps, grader)
    gateway episode          the same `episode_sample` (workers/core/gateway.py assembles the agent's calls)

Each producer says what it sampled: token ids, the loss mask (None: every response token is the policy's), the
behaviour logprobs, the weights versions and the reward; the request gives the ids, the prompt text and the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contract import version_marks
from contract.sample import PromptRequest, Sample
from workers.rewards import RewardOutcome


def build_sample(request: PromptRequest, *, job_id: int, instance_id: str, prompt_ids: Sequence[int],
                 response_ids: Sequence[int], logprobs: Sequence[float], loss_mask: Sequence[int] | None,
                 version: int, marks: Sequence[Sequence[int]] | None = None, reward: RewardOutcome,
                 finish_reason: str, prompt_text: str, response_text: str, started_at: float, finished_at: float,
                 truncated: bool, **detail: Any) -> Sample:
    """`version`: the weights the request was admitted under (its behaviour policy), unless `marks` (the engine's
    record of which versions sampled which tokens) say otherwise: then the oldest of them, and the marks when there
    are several. `detail`: the producer's own fields of `Sample` (an episode's turns, speculative decoding counts)."""
    policy_version, kept = version_marks.for_sample(marks, version)
    return Sample(
        job_id=job_id, prompt_id=request.prompt_id, group_id=request.group_id, sample_id=request.sample_id,
        policy_version=policy_version, version_marks=kept, prompt_ids=list(prompt_ids),
        response_ids=list(response_ids), behaviour_logprobs=list(logprobs), finish_reason=finish_reason,
        prompt_text=prompt_text, response_text=response_text, reward=reward.value,
        reward_components=dict(reward.components), reward_error=reward.error, meta=dict(request.meta),
        queued_at=request.queued_at, started_at=started_at, finished_at=finished_at, instance_id=instance_id,
        truncated=truncated, loss_mask=None if loss_mask is None else list(loss_mask), **detail,
    )
