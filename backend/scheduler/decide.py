"""One scheduling pass: `decide(snapshot) -> Decisions` (pure; sorts once, O(n log n) in the waiting items).

Admission walks the queue in order (backend/scheduler/order.py). The first item that does not fit is the head: it
gets a reservation at its estimated start (the "shadow" time when enough running items have ended). A later item
that fits now may start (backfill) only if it ends before the shadow time or uses only slots the head will not need
then, so backfill never delays the head. Items held by their team's caps (max_concurrent_jobs,
max_generation_instances) or needing more than a pool has hold nobody up. Under policy "fifo" (today's rule, kept
for comparison) the order is submit time and nothing passes a blocked head. Preemption and shrinking for items that
outrank running ones: backend/scheduler/preempt.py.
"""

from __future__ import annotations

import bisect
import math

from backend.scheduler.order import fair_order, fifo_order
from backend.scheduler.preempt import plan_preemptions
from backend.scheduler.snapshot import DEFAULT_QUOTA, Decisions, Pools, QueueInfo, Running, Snapshot, TeamQuota, Waiting


class _Releases:
    """Slots the running items give back over time (by estimated end), as prefix sums for bisecting."""

    def __init__(self, running: list[Running]) -> None:
        ends = sorted((r.est_end, r.training, r.generation) for r in running)
        self.times = [end for end, _, _ in ends]
        self.training, self.generation = [0], [0]
        for _, t, g in ends:
            self.training.append(self.training[-1] + t)
            self.generation.append(self.generation[-1] + g)

    def when(self, free: Pools, training: int, generation: int) -> float:
        """The estimated end by which `free` plus what was released covers the demand (inf if none does)."""
        k = max(_first_at_least(self.training, training - free.training),
                _first_at_least(self.generation, generation - free.generation))
        if k == 0:
            return -math.inf
        return self.times[k - 1] if k <= len(self.times) else math.inf

    def released_by(self, moment: float) -> tuple[int, int]:
        k = bisect.bisect_right(self.times, moment)
        return self.training[k], self.generation[k]


def _first_at_least(prefix: list[int], amount: int) -> int:
    """Smallest k with prefix[k] >= amount (len(prefix) when none)."""
    return bisect.bisect_left(prefix, amount) if amount > 0 else 0


def decide(snapshot: Snapshot) -> Decisions:
    usage: dict[int, list[int]] = {}  # team -> [training, generation, items holding slots]
    for r in snapshot.running:
        held = usage.setdefault(r.team, [0, 0, 0])
        held[0], held[1], held[2] = held[0] + r.training, held[1] + r.generation, held[2] + 1
    free = Pools(snapshot.training_slots - sum(r.training for r in snapshot.running),
                  snapshot.generation_slots - sum(r.generation for r in snapshot.running))
    fifo = snapshot.policy == "fifo"
    order = fifo_order(snapshot) if fifo else fair_order(snapshot, usage)
    releases = _Releases(snapshot.running)
    decisions = Decisions()
    blocked: list[tuple[Waiting, float]] = []  # held for capacity, in order, with estimated starts (preemption)
    head: Waiting | None = None
    shadow, spare = math.inf, Pools(0, 0)
    pending = Pools(0, 0)  # demand of blocked items ahead (for the ETA estimate)
    position = 0
    for item in order:
        held = usage.setdefault(item.team, [0, 0, 0])
        quota = snapshot.teams.get(item.team, DEFAULT_QUOTA)
        fits = item.training <= free.training and item.generation_min <= free.generation
        capped = None if quota.max_jobs is None and quota.max_generation is None else _quota_hold(item, held, quota)
        if capped is None and fits and (head is None or (not fifo and _backfills(snapshot, item, shadow, spare))):
            generation = min(item.generation, free.generation)
            free.training, free.generation = free.training - item.training, free.generation - generation
            held[0], held[1], held[2] = held[0] + item.training, held[1] + generation, held[2] + 1
            if head is not None and snapshot.now + item.est_s > shadow:  # backfilled into the head's spare slots
                spare.training, spare.generation = spare.training - item.training, spare.generation - generation
            decisions.admit.append(item.id)
            continue
        position += 1
        if capped is not None:
            decisions.queue[item.id] = QueueInfo(position, capped[0], capped[1], None, _needs(item))
            continue
        if item.training > snapshot.training_slots or item.generation_min > snapshot.generation_slots:
            decisions.queue[item.id] = _never_fits(snapshot, item, position)
            continue
        pending.training += item.training
        pending.generation += item.generation_min
        start = releases.when(free, pending.training, pending.generation)
        if head is None:
            head, shadow = item, start
            released = releases.released_by(shadow) if math.isfinite(shadow) else (0, 0)
            spare = Pools(free.training + released[0] - item.training,
                           free.generation + released[1] - item.generation_min)
        blocked.append((item, start))
        decisions.queue[item.id] = _capacity_info(snapshot, item, free, position, start, behind=item is not head)
    if not fifo:
        plan_preemptions(snapshot, blocked, usage, free, decisions)
    return decisions


def _backfills(snapshot: Snapshot, item: Waiting, shadow: float, spare: Pools) -> bool:
    """Starting `item` now does not delay the head: it ends before the head's start, or fits in what the head leaves."""
    if math.isfinite(shadow) and snapshot.now + item.est_s <= shadow:
        return True
    return item.training <= spare.training and item.generation_min <= spare.generation


def _quota_hold(item: Waiting, held: list[int], quota: TeamQuota) -> tuple[str, str] | None:
    if quota.max_jobs is not None and held[2] >= quota.max_jobs:
        return ("quota:max_concurrent_jobs",
                f"waiting for the team's quota: max_concurrent_jobs ({quota.max_jobs}) reached, {held[2]} running")
    if quota.max_generation is not None and held[1] + item.generation > quota.max_generation:
        return ("quota:max_generation_instances",
                f"waiting for the team's quota: max_generation_instances ({quota.max_generation}) with {held[1]} in "
                f"use, this item needs {item.generation}")
    return None


def _needs(item: Waiting) -> dict[str, int]:
    """What the item asks for: its gang of training slots and its target generation instances."""
    return {"training": item.training, "generation": item.generation}


def _never_fits(snapshot: Snapshot, item: Waiting, position: int) -> QueueInfo:
    if item.training > snapshot.training_slots:
        pool, need, have = "training_slots", item.training, snapshot.training_slots
    else:
        pool, need, have = "generation_slots", item.generation_min, snapshot.generation_slots
    name = pool.replace("_", " ")
    worker = pool.split("_")[0]
    return QueueInfo(position, pool, f"waiting for {name}: needs {need}, the pool has {have} (add workers with "
                     f"`streamrl worker --pool {worker}`)", None, _needs(item))


def _capacity_info(snapshot: Snapshot, item: Waiting, free: Pools, position: int, start: float,
                   behind: bool) -> QueueInfo:
    pool = "training_slots" if item.training > free.training or item.generation_min == 0 else "generation_slots"
    ahead = behind and item.training <= free.training and item.generation_min <= free.generation
    eta = None if not math.isfinite(start) else max(0.0, start - snapshot.now)
    have = free.training if pool == "training_slots" else free.generation
    need = item.training if pool == "training_slots" else item.generation_min
    return QueueInfo(position, pool, _reason(snapshot, pool, need, max(0, have), ahead), eta, _needs(item))


_REASONS: dict[tuple[str, int, int, int, bool], str] = {}  # few distinct texts per pass: built once each


def _reason(snapshot: Snapshot, pool: str, need: int, have: int, ahead: bool) -> str:
    total = snapshot.training_slots if pool == "training_slots" else snapshot.generation_slots
    cached = _REASONS.get((pool, need, have, total, ahead))
    if cached is not None:
        return cached
    name = pool.replace("_", " ")
    if ahead:
        why = f"waiting for {name}: {have} of {total} free, held for a job ahead in the queue (it starts first; " \
              "starting this one now would delay it)"
    elif pool == "training_slots":
        gang = f" (a training.devices: {need} job starts its {need} ranks together)" if need > 1 else ""
        why = f"waiting for training slots: needs {need}{gang}, {have} of {total} free"
    else:
        why = f"waiting for generation slots: needs {need}, {have} of {total} free"
    if len(_REASONS) > 10_000:
        _REASONS.clear()
    _REASONS[(pool, need, have, total, ahead)] = why
    return why
