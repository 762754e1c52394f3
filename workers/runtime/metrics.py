"""Per-iteration metrics (keys of docs/api.md) computed from the samples an iteration trained on. Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from contract import version_marks
from contract.sample import Sample

MISMATCH_KEYS = ("mismatch_kl", "mismatch_abs_mean", "mismatch_abs_max", "mismatch_out_fraction", "mismatch_tokens")


def length_metrics(lengths: Sequence[int]) -> dict[str, float]:
    if not lengths:
        return {}
    arr = np.asarray(lengths, dtype=float)
    p50, p90, p99 = (float(v) for v in np.percentile(arr, [50, 90, 99]))
    return {"len_p50": p50, "len_p90": p90, "len_p99": p99, "len_max": float(arr.max()),
            "skew_p99_p50": p99 / max(p50, 1.0)}


def sample_metrics(samples: Sequence[Sample], train_version: int) -> dict[str, float]:
    """Reward, lengths and staleness of the samples of one iteration trained at weights `train_version`."""
    if not samples:
        return {}
    rewards = np.asarray([s.reward for s in samples], dtype=float)
    staleness = [train_version - s.policy_version for s in samples]
    out: dict[str, float] = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "staleness_mean": float(np.mean(staleness)),
        "staleness_max": float(max(staleness)),  # the oldest sample's lag, in versions
        "reward_errors": float(sum(1 for s in samples if s.reward_error)),
        "truncated_fraction": sum(1 for s in samples if cut(s)) / len(samples),
        "reward_flat_groups": flat_group_fraction(samples),
    }
    out.update(length_metrics([len(s.response_ids) for s in samples]))  # an episode's length: all its tokens
    out.update(turn_metrics(samples))
    out.update(token_staleness(samples, train_version))
    out.update(speculation_metrics(samples))
    return out


def speculation_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """Grouped speculative decoding (workers/generation/engines/hf_speculative.py): response tokens per forward pass
    (1.0 without speculation), the share of draft tokens the target model accepted, tokens per forward pass while
    speculating (the tail's speed-up; the planner's `tail_tokens_per_forward`), and the tail phase: seconds from
    the moment 90% of the samples had finished to the last finish. {} when the engine recorded no passes."""
    counted = [s for s in samples if s.forward_passes > 0]
    if not counted:
        return {}
    drafted = sum(s.draft_tokens for s in counted)
    finished = sorted(s.finished_at for s in counted)
    out = {"tokens_per_forward": sum(len(s.response_ids) for s in counted) / sum(s.forward_passes for s in counted),
           "tail_phase_seconds": finished[-1] - finished[math.ceil(0.9 * len(finished)) - 1]}
    if drafted:
        out["spec_acceptance"] = sum(s.accepted_tokens for s in counted) / drafted
    speculating = sum(s.speculative_passes for s in counted)
    if speculating:
        out["tail_tokens_per_forward"] = (sum(s.accepted_tokens for s in counted) + speculating) / speculating
    return out


def token_staleness(samples: Sequence[Sample], train_version: int) -> dict[str, float]:
    """In-flight weight updates: staleness (train_version - the version that sampled it) averaged over the trained
    tokens, its maximum, and the share of samples whose tokens span more than one version. `staleness_mean` counts a
    sample at its oldest version; this counts each token at its own."""
    total = weighted = 0
    oldest = 0
    for sample in samples:
        versions = version_marks.token_versions(sample.version_marks, len(sample.response_ids), sample.policy_version)
        mask = sample.loss_mask or [1] * len(versions)
        for version, trained in zip(versions, mask, strict=True):
            if trained:
                total += 1
                weighted += train_version - version
                oldest = max(oldest, train_version - version)
    return {"token_staleness_mean": weighted / max(total, 1), "token_staleness_max": float(oldest),
            "multi_version_fraction": sum(1 for s in samples if s.version_marks) / len(samples)}


def cut(sample: Sample) -> bool:
    """Cut short: a single-turn sample at max_tokens; an episode at max_episode_tokens or in any of its turns at
    max_tokens (an episode whose every turn was cut used to count as not truncated)."""
    return sample.truncated or sample.turns_truncated > 0


def turn_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """Multi-turn episodes: turns per episode (mean, p90, max), the share of their tokens the policy generated
    (trained), the episodes the environment failed and the share of turns cut at max_tokens; {} for single-turn
    samples."""
    episodes = [s for s in samples if s.loss_mask is not None]
    if not episodes:
        return {}
    turns = np.asarray([s.turns for s in episodes], dtype=float)
    tokens = sum(len(s.response_ids) for s in episodes)
    return {"turns_mean": float(turns.mean()), "turns_p90": float(np.percentile(turns, 90)),
            "turns_max": float(turns.max()),
            "policy_token_fraction": sum(s.trained_tokens for s in episodes) / max(tokens, 1),
            "episode_errors": float(sum(1 for s in episodes if s.episode_end == "error")),
            # per turn: the share of the policy's turns cut at generation.max_tokens
            "turns_truncated_fraction": sum(s.turns_truncated for s in episodes) / max(float(turns.sum()), 1.0)}


def flat_group_fraction(samples: Sequence[Sample]) -> float:
    """Share of the groups whose samples all got the same reward: such a group has zero advantage under GRPO (no
    learning signal). A group of one sample counts as flat."""
    groups: dict[str, list[float]] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, []).append(sample.reward)
    flat = sum(1 for rewards in groups.values() if max(rewards) - min(rewards) <= 1e-9)
    return flat / len(groups)


def token_counts(samples: Sequence[Sample]) -> dict[str, float]:
    """Usage (backend/services/usage.py): response tokens the policy sampled (an episode's policy turns) and the
    prompt + response tokens the trainer processed."""
    return {"tokens_generated": float(sum(s.trained_tokens for s in samples)),
            "tokens_trained": float(sum(len(s.prompt_ids) + len(s.response_ids) for s in samples))}


def rates(samples: Sequence[Sample], iteration_seconds: float) -> dict[str, float]:
    tokens = sum(len(s.response_ids) for s in samples)
    seconds = max(iteration_seconds, 1e-9)
    return {"samples_per_s": len(samples) / seconds, "tokens_per_s": tokens / seconds}


def generation_window(samples: Sequence[Sample], fallback_start: float,
                      previous_end: float | None = None) -> tuple[float, float]:
    """(start, end) of the generation that produced `samples`, from the engines' own timestamps: end = the last
    `finished_at`, start = the first `started_at` (else `fallback_start`, the dispatch time), but never before
    `previous_end` (async: the previous iteration's generation end; requests admitted earlier shared the engine
    with it). Independent of when the driver polled, so training time never leaks into T_gen."""
    finished = [s.finished_at for s in samples if s.finished_at > 0]
    if not finished:
        return fallback_start, fallback_start
    started = [s.started_at for s in samples if s.started_at > 0]
    start = min(started) if started else fallback_start
    if previous_end is not None:
        start = max(start, previous_end)
    return start, max(start, max(finished))


def producing_instances(samples: Sequence[Sample]) -> int:
    """How many distinct generation instances produced `samples` (not how many are alive now)."""
    return len({s.instance_id for s in samples if s.instance_id})


def trainer_metrics(step: dict[str, float]) -> dict[str, float]:
    """The optimizer step's metrics under the API's names (loss, kl, entropy, clip_frac) plus grad_norm and the
    training-inference mismatch (workers/training/mismatch.py); reverse_kl (and topk_kl) to the teacher for distill
    jobs."""
    keep = ("loss", "kl", "entropy", "clip_frac", "ratio", "grad_norm", "lr", "is_weight", "policy_loss", "value_loss",
            "is_masked_fraction", "reverse_kl", "topk_kl", *MISMATCH_KEYS)
    return {name: float(step[name]) for name in keep if name in step}


def finite(metrics: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe: NaN/inf become None."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
