"""Generation stage of the simulator: dispatch prompt groups to instances, then continuous batching per instance.

Dispatch units are prompts (a prompt's `group_size` samples stay on one instance, as in the platform), so the
per-token-latency profile handed to `contract.skew` is expressed per prompt: PTL_prompt(b) = PTL(b * G).
Inside an instance, every running sequence advances one token per decode step; a step with BS running sequences
takes PTL(BS) seconds; a finished sequence's slot is refilled from the instance's queue at once (backfill).
Grouped speculative decoding (`generation.speculative`) runs while at most max_batch_size // 4 sequences decode
(the tail); there a step emits `tail_tokens_per_forward` tokens per sequence (measured: the iteration metric of that
name) for about PTL(BS), so a token costs PTL(BS) / tail_tokens_per_forward (`speculative_step_costs`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from backend.planner.lengths import GroupLengths
from contract.catalog import DispatchPolicy
from contract.dispatch import SplitRequest, split
from contract.skew import PTLProfile, SplitPlan
from contract.spec import SPECULATIVE_TAIL_DIVISOR

Dispatch = DispatchPolicy
DISPATCH_SHARD_INSTANCES = 64


@dataclass(frozen=True)
class InstanceRun:
    instance: int
    sample_ids: np.ndarray  # (M*G,) flat sample ids in admission order
    finish_offsets: np.ndarray  # (M*G,) seconds after the instance started
    busy_seconds: float  # time until its last sample finished
    long_tail: bool


def step_costs(ptl: PTLProfile, max_batch: int) -> np.ndarray:
    """(max_batch + 1,) seconds per decode step indexed by the number of running sequences (index 0 unused)."""
    return np.array([0.0] + [ptl(bs) for bs in range(1, max_batch + 1)])


def speculative_step_costs(table: np.ndarray, max_batch_size: int, tail_tokens_per_forward: float) -> np.ndarray:
    """`table` (step_costs) with the tail's steps (at most max_batch_size // 4 running) per emitted token: divided
    by the measured tokens per forward pass while speculating. 1.0: unchanged (no speculation)."""
    if tail_tokens_per_forward == 1.0:
        return table
    if tail_tokens_per_forward < 1.0:
        raise ValueError(f"tail_tokens_per_forward must be >= 1, got {tail_tokens_per_forward}")
    tail = min(len(table) - 1, max(1, max_batch_size // SPECULATIVE_TAIL_DIVISOR))
    out = table.copy()
    out[1:tail + 1] /= tail_tokens_per_forward
    return out


def run_instance(lengths: np.ndarray, batch_cap: int, ptl: PTLProfile | np.ndarray) -> np.ndarray:
    """Finish offsets (seconds) of sequences with output `lengths`, admitted in order, `batch_cap` at a time.

    `ptl` is a profile or a precomputed `step_costs` table covering batch_cap."""
    n = len(lengths)
    finish = np.zeros(n)
    if n == 0:
        return finish
    cap = max(1, min(batch_cap, n))
    step_cost = ptl if isinstance(ptl, np.ndarray) else step_costs(ptl, cap)
    assert len(step_cost) > cap, "step cost table shorter than the batch cap"
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


def scaled_profile(ptl: PTLProfile, factor: int) -> PTLProfile:
    """PTL'(b) = PTL(b * factor): the step time of b units each `factor` sequences wide. Units are prompts of
    `factor` samples (the dispatch profile), or this job's rows decoding alongside `factor - 1` other jobs' as many
    rows (shared generation instances, `simulator.job_generation`). Points stay at the profile's batch sizes."""
    return PTLProfile(tuple((bs, ptl(bs * factor)) for bs, _ in ptl.points if bs * factor <= 65_536) or
                      ((1, ptl(factor)),))


def _split(
    dispatch: Dispatch, predicted: list[float], n_instances: int, ptl: PTLProfile, *, alpha: float,
    recent_lengths: np.ndarray, prompt_cap: int, seed: int,
) -> SplitPlan:
    """One shard's split by the named policy (contract/dispatch.py: the table the runtime's dispatcher uses)."""
    return split(dispatch, SplitRequest(predicted=predicted, n_instances=n_instances, max_batch_size=prompt_cap,
                                        seed=seed, ptl=ptl, recent_lengths=recent_lengths.tolist(), alpha=alpha))


def _dispatch(
    groups: GroupLengths, n_busy: int, ptl: PTLProfile, *, prompt_cap: int, dispatch: Dispatch, alpha: float,
    recent_lengths: np.ndarray, seed: int,
) -> list[tuple[int, list[int], int, bool]]:
    """(instance, prompt indices in admission order, batch size in prompts, long_tail) per busy instance.

    Above DISPATCH_SHARD_INSTANCES instances the prompts and instances are cut into random shards dispatched
    independently (a hierarchical dispatcher), keeping the cost linear in the number of prompts.
    """
    n_prompts, group_size = groups.lengths.shape
    shards = math.ceil(n_busy / DISPATCH_SHARD_INSTANCES)
    order = np.random.default_rng(seed).permutation(n_prompts) if shards > 1 else np.arange(n_prompts)
    prompt_ptl = scaled_profile(ptl, group_size)
    out: list[tuple[int, list[int], int, bool]] = []
    for prompts, instances in zip(np.array_split(order, shards), np.array_split(np.arange(n_busy), shards),
                                  strict=True):
        plan = _split(dispatch, groups.predicted[prompts].tolist(), len(instances), prompt_ptl, alpha=alpha,
                      recent_lengths=recent_lengths, prompt_cap=prompt_cap, seed=seed)
        out.extend((int(instances[a.instance]), [int(prompts[i]) for i in a.prompt_indices], a.batch_size,
                    a.long_tail) for a in plan.assignments)
    return out


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
    tail_tokens_per_forward: float = 1.0,
) -> list[InstanceRun]:
    """One iteration's generation on `n_instances` instances; `max_batch_size` counts sequences;
    `tail_tokens_per_forward`: measured speculative speed-up of the tail (1.0: none)."""
    n_prompts, group_size = groups.lengths.shape
    busy_instances = max(1, min(n_instances, n_prompts))  # instances beyond one prompt each stay idle
    sketch = np.quantile(recent_lengths, np.linspace(0, 1, 1001)) if len(recent_lengths) > 1001 else recent_lengths
    assignments = _dispatch(groups, busy_instances, ptl, prompt_cap=max(1, max_batch_size // group_size),
                            dispatch=dispatch, alpha=alpha, recent_lengths=sketch, seed=seed)
    biggest = max((min(max(1, b) * group_size, len(p) * group_size) for _, p, b, _ in assignments), default=1)
    table = speculative_step_costs(step_costs(ptl, max(1, biggest)), max_batch_size, tail_tokens_per_forward)
    runs = []
    for instance, prompt_indices, batch_size, long_tail in assignments:
        prompts = np.asarray(prompt_indices, dtype=np.int64)
        sample_ids = (prompts[:, None] * group_size + np.arange(group_size)[None, :]).reshape(-1)  # (M*G,)
        lengths = groups.lengths.reshape(-1)[sample_ids]
        finish = run_instance(lengths, max(1, batch_size) * group_size, table)
        runs.append(InstanceRun(instance, sample_ids, finish, float(finish.max(initial=0.0)), long_tail))
    empty = np.zeros(0, dtype=np.int64)
    runs.extend(InstanceRun(i, empty, np.zeros(0), 0.0, False) for i in range(busy_instances, n_instances))
    return runs
