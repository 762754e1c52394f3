"""One queue for everything that takes a slot: a pure decision over a snapshot (no database, no torch).

    decisions = decide(Snapshot(now, training_slots, generation_slots, teams, running, waiting))

See backend/scheduler/decide.py (admission, backfill, queue reasons) and preempt.py (shrinking, hand-backs).
"""

from backend.scheduler.decide import decide
from backend.scheduler.snapshot import (
    PRIORITIES,
    PRIORITY_RANK,
    Decisions,
    QueueInfo,
    Running,
    Snapshot,
    TeamQuota,
    Waiting,
    dominant_share,
)

__all__ = ["PRIORITIES", "PRIORITY_RANK", "Decisions", "QueueInfo", "Running", "Snapshot", "TeamQuota", "Waiting",
           "decide", "dominant_share"]
