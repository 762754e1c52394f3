"""The queue's order: priority class, then the team's weighted dominant share, then submit time.

`fair_order` interleaves teams by DRF as the items would start: after each item its team's share grows by the item's
demand, so a team with ten queued jobs does not hold every place ahead of a team with one. A heap holds one entry per
team (its head item), so ordering n items of T teams costs O(n log n + n log T).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator

from backend.scheduler.snapshot import DEFAULT_QUOTA, Snapshot, Waiting


def fifo_order(snapshot: Snapshot) -> list[Waiting]:
    """Today's rule: submit order, whatever the priority or team."""
    return sorted(snapshot.waiting, key=lambda w: (w.submitted, w.id))


def fair_order(snapshot: Snapshot, usage: dict[int, list[int]]) -> Iterator[Waiting]:
    """Waiting items in the order they should start; `usage` (team -> [training, generation]) is not modified."""
    per_team: dict[int, list[Waiting]] = defaultdict(list)
    for item in snapshot.waiting:
        per_team[item.team].append(item)
    pools = (snapshot.training_slots or 1, snapshot.generation_slots or 1)
    held = {team: list(usage.get(team, (0, 0)))[:2] for team in per_team}
    scale = {team: (1.0 / max(snapshot.teams.get(team, DEFAULT_QUOTA).share, 1e-9),
                    snapshot.teams.get(team, DEFAULT_QUOTA).recent) for team in per_team}

    def key(team: int, head: Waiting) -> tuple[int, float, float, int, int]:
        # standing(): the weighted dominant share held (plus the queued items ahead of it) and the recent average
        t, g = held[team]
        inverse_weight, recent = scale[team]
        return -head.priority, max(t / pools[0], g / pools[1]) * inverse_weight + recent, head.submitted, head.id, team

    heap: list[tuple[int, float, float, int, int]] = []
    for team, items in per_team.items():
        items.sort(key=lambda w: (-w.priority, w.submitted, w.id), reverse=True)  # pop() from the end = next
        heap.append(key(team, items[-1]))
    heapq.heapify(heap)
    while heap:
        team = heap[0][-1]
        items = per_team[team]
        item = items.pop()
        yield item
        counted = held[team]
        counted[0] += item.training
        counted[1] += item.generation_min
        if items:
            heapq.heapreplace(heap, key(team, items[-1]))
        else:
            heapq.heappop(heap)
