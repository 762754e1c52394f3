"""What the length ranker learns from a finished sample: its cost on a generation instance, in decode-step tokens.

A single-turn sample costs its response tokens. An episode (workers/core/episode.py) costs more than its tokens
say: the policy's tokens are decoded one step each, the environment's tokens are prefilled in one pass with the next
turn's admission, and every turn after the first is one more admission (a prefill of the whole conversation so far)
plus one environment step, run between the instance's decode steps. So, per episode:

    cost = policy tokens + environment tokens * PREFILL_WEIGHT + (turns - 1) * TURN_TOKENS

The ranker fits log(cost) per prompt (workers/dispatch/ranker.py), so skew-aware dispatch sees an episode that
takes many short turns as the long one it is, and Algorithm 2's P90/P50 come from the same costs.
"""

from __future__ import annotations

import math

from contract.sample import Sample

PREFILL_WEIGHT = 0.25  # a prefilled token against a decoded one (batched matmuls instead of one step each)
TURN_TOKENS = 16  # one more admission and environment step, in decode steps of the batch


def sample_cost(sample: Sample, *, turn_tokens: float = TURN_TOKENS, prefill_weight: float = PREFILL_WEIGHT) -> int:
    """The sample's cost in decode-step tokens (its response length for a single-turn sample)."""
    if sample.loss_mask is None:
        return len(sample.response_ids)
    policy = sum(sample.loss_mask)
    environment = len(sample.loss_mask) - policy
    turns = max(1, sample.turns or 1)
    return policy + math.ceil(environment * prefill_weight) + round((turns - 1) * turn_tokens)
