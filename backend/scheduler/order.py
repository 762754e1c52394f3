"""The queue's order: priority class, then the team's weighted dominant share, then submit time.

`fair_order` interleaves teams by DRF as the items would start: after each item its team's share grows by the item's
demand, so a team with ten queued jobs does not hold every place ahead of a team with one. A heap holds one entry per
team (its head item), so ordering n items of T teams costs O(n log n + n log T).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterator

from backend.scheduler.snapshot import Snapshot, Waiting, standing


def fifo_order(snapshot: Snapshot) -> list[Waiting]:
    """Today's rule: submit order, whatever the priority or team."""
    return sorted(snapshot.waiting, key=lambda w: (w.submitted, w.id))


def fair_order(snapshot: Snapshot, usage: dict[int, list[int]]) -> Iterator[Waiting]:
    """Waiting items in the order they should start; `usage` (team -> [training, generation]) is not modified."""
    per_team: dict[int, list[Waiting]] = defaultdict(list)
    for item in snapshot.waiting:
        per_team[item.team].append(item)
    virtual = {team: list(usage.get(team, (0, 0)))[:2] for team in per_team}
    heap: list[tuple[int, float, float, int, int]] = []
    for team, items in per_team.items():
        items.sort(key=lambda w: (-w.priority, w.submitted, w.id), reverse=True)  # pop() from the end = next
        heapq.heappush(heap, _key(snapshot, team, items[-1], virtual[team]))
    while heap:
        *_, team = heapq.heappop(heap)
        items = per_team[team]
        item = items.pop()
        yield item
        held = virtual[team]
        held[0] += item.training
        held[1] += item.generation_min
        if items:
            heapq.heappush(heap, _key(snapshot, team, items[-1], held))


def _key(snapshot: Snapshot, team: int, head: Waiting, held: list[int]) -> tuple[int, float, float, int, int]:
    return -head.priority, standing(held[0], held[1], snapshot, team), head.submitted, head.id, team
