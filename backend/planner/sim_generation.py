"""Generation stage of the simulator: dispatch prompt groups to instances, then continuous batching per instance.

Dispatch units are prompts (a prompt's `group_size` samples stay on one instance, as in the platform), so the
per-token-latency profile handed to `workers.dispatch.split` is expressed per prompt: PTL_prompt(b) = PTL(b * G).
Inside an instance, every running sequence advances one token per decode step; a step with BS running sequences
takes PTL(BS) seconds; a finished sequence's slot is refilled from the instance's queue at once (backfill).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Literal

import numpy as np

from backend.planner.lengths import GroupLengths
from workers.dispatch.split import PTLProfile, random_split, skew_aware_split

Dispatch = Literal["random", "skew_aware"]


@dataclass(frozen=True)
class InstanceRun:
    instance: int
    sample_ids: np.ndarray  # (M*G,) flat sample ids in admission order
    finish_offsets: np.ndarray  # (M*G,) seconds after the instance started
    busy_seconds: float  # time until its last sample finished
    long_tail: bool


def run_instance(lengths: np.ndarray, batch_cap: int, ptl: PTLProfile) -> np.ndarray:
    """Finish offsets (seconds) of sequences with output `lengths`, admitted in order, `batch_cap` at a time."""
    n = len(lengths)
    finish = np.zeros(n)
    if n == 0:
        return finish
    cap = max(1, min(batch_cap, n))
    step_cost = np.array([0.0] + [ptl(bs) for bs in range(1, cap + 1)])  # (cap+1,) seconds per decode step
    running: list[tuple[int, int]] = []  # (finish step, index)
    step, clock, nxt = 0, 0.0, 0
    while nxt < n and len(running) < cap:
        heapq.heappush(running, (int(lengths[nxt]), nxt))
        nxt += 1
    while running:
        done_step = running[0][0]
        clock += (done_step - step) * step_cost[len(running)]
        step = done_step
        while running and running[0][0] == step:
            _, idx = heapq.heappop(running)
            finish[idx] = clock
        while nxt < n and len(running) < cap:
            heapq.heappush(running, (step + int(lengths[nxt]), nxt))
            nxt += 1
    return finish


def per_prompt_profile(ptl: PTLProfile, group_size: int) -> PTLProfile:
    return PTLProfile(tuple((bs, ptl(bs * group_size)) for bs, _ in ptl.points if bs * group_size <= 65_536) or
                      ((1, ptl(group_size)),))


def simulate_generation(
    groups: GroupLengths,
    n_instances: int,
    ptl: PTLProfile,
    *,
    max_batch_size: int,
    dispatch: Dispatch,
    alpha: float,
    recent_lengths: np.ndarray,
    seed: int,
) -> list[InstanceRun]:
    """One iteration's generation on `n_instances` instances; `max_batch_size` counts sequences."""
    n_prompts, group_size = groups.lengths.shape
    prompt_cap = max(1, max_batch_size // group_size)
    if dispatch == "skew_aware":
        plan = skew_aware_split(
            groups.predicted.tolist(), n_instances, per_prompt_profile(ptl, group_size),
            recent_lengths=recent_lengths.tolist(), alpha=alpha, max_batch_size=prompt_cap,
        )
    elif dispatch == "random":
        plan = random_split(n_prompts, n_instances, seed=seed, max_batch_size=prompt_cap)
    else:
        raise ValueError(f"unknown dispatch {dispatch!r}: use 'random' or 'skew_aware'")
    runs = []
    for a in plan.assignments:
        prompts = np.asarray(a.prompt_indices, dtype=np.int64)
        sample_ids = (prompts[:, None] * group_size + np.arange(group_size)[None, :]).reshape(-1)  # (M*G,)
        lengths = groups.lengths.reshape(-1)[sample_ids]
        finish = run_instance(lengths, max(1, a.batch_size) * group_size, ptl)
        runs.append(InstanceRun(a.instance, sample_ids, finish, float(finish.max(initial=0.0)), a.long_tail))
    return runs
