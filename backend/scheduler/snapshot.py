"""What one scheduling pass sees and decides: plain dataclasses, no database, no Redis (torch-free, pure).

The controller builds a `Snapshot` from the database and the worker registry (backend/services/admission.py); the
benchmark builds one from its simulated cluster. `decide(snapshot)` (backend/scheduler/decide.py) returns
`Decisions`. Times are seconds on one clock (the controller's epoch seconds, or the simulation's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from contract.scheduling import PRIORITIES as PRIORITY_CHOICES
from contract.scheduling import PRIORITY_RANK

PRIORITIES = tuple(PRIORITY_CHOICES)  # JobSpec.priority, lowest first; a rank is an index here
NORMAL = PRIORITY_RANK["normal"]


@dataclass(frozen=True)
class TeamQuota:
    share: float = 1.0  # fair-share weight
    max_jobs: int | None = None  # max_concurrent_jobs: items holding slots at once (None: no cap)
    max_generation: int | None = None  # max_generation_instances: generation slots targeted at once
    recent: float = 0.0  # the team's weighted dominant share averaged over the recent past (decayed; Slurm-style)


DEFAULT_QUOTA = TeamQuota()  # a team the snapshot does not list: weight 1, no caps


@dataclass(frozen=True)
class Waiting:
    """An item waiting for slots: a queued job, Tinker session or fine-tuning job."""

    id: int
    team: int
    submitted: float
    priority: int = NORMAL
    training: int = 1  # training slots it takes at once (its gang)
    generation: int = 0  # generation instances it targets
    generation_min: int = 0  # instances it can start with (elastic floor; the rest follow as slots free up)
    est_s: float = math.inf  # estimated run time (planner's cost model or recorded iteration times)


@dataclass(frozen=True)
class Running:
    """An item holding slots."""

    id: int
    team: int
    started: float
    priority: int = NORMAL
    training: int = 1
    generation: int = 0  # generation instances it holds (or targets)
    generation_min: int = 0  # shrinking stops here
    preemptible: bool = True
    est_end: float = math.inf  # when it is expected to release its slots
    protected_until: float = 0.0  # not preempted before (its first checkpoint: no thrash)
    preempting: bool = False  # asked to hand back already: its slots are on their way back


@dataclass(frozen=True)
class Snapshot:
    now: float
    training_slots: int
    generation_slots: int
    teams: dict[int, TeamQuota]
    running: list[Running]
    waiting: list[Waiting]
    policy: str = "fair"  # "fair": priority, DRF, backfill, preemption; "fifo": submit order, head-of-line blocking
    hysteresis: float = 0.1  # a team counts as over its share only past fair * (1 + hysteresis)
    share_margin: float = 1.0  # fair-share preemption: the running team's standing > the waiting one's * (1 + margin)
    grace_s: float = 60.0  # a hand-back takes up to this long: an item starting sooner anyway preempts nobody
    finishing_s: float = 120.0  # a job expected to end within this is never preempted (the controller: 2 x grace)
    preempt_scan: int = 64  # waiting items (in order) considered for preemption per pass


@dataclass
class Pools:
    training: int
    generation: int


@dataclass(slots=True)  # not frozen: one per waiting item per pass, built in the hot loop
class QueueInfo:
    position: int  # 1 = next to start
    waiting_for: str  # training_slots | generation_slots | quota:max_concurrent_jobs | quota:max_generation_instances
    reason: str  # one line, resource-level (the API adds who holds it, per caller)
    eta_s: float | None  # estimated seconds until it starts; None when no estimate exists
    needs: dict[str, int] = field(default_factory=dict)  # {"training": gang, "generation": target instances}


@dataclass
class Decisions:
    admit: list[int] = field(default_factory=list)  # waiting ids to start now, in order
    preempt: dict[int, str] = field(default_factory=dict)  # running id -> why (says the cause, never the other job)
    shrink: dict[int, int] = field(default_factory=dict)  # running id -> new generation target
    queue: dict[int, QueueInfo] = field(default_factory=dict)  # every waiting item not admitted


def dominant_share(training: int, generation: int, snapshot: Snapshot, weight: float) -> float:
    """DRF: the larger of a team's shares of the two pools, divided by its weight."""
    t = training / snapshot.training_slots if snapshot.training_slots else 0.0
    g = generation / snapshot.generation_slots if snapshot.generation_slots else 0.0
    return max(t, g) / max(weight, 1e-9)


def standing(training: int, generation: int, snapshot: Snapshot, team: int) -> float:
    """What orders teams: the weighted dominant share of the slots it holds now plus its recent average, so a team
    whose big gang just ended does not jump ahead of teams that waited through it (gangs larger than a team's fair
    share are fair only over time)."""
    quota = snapshot.teams.get(team, DEFAULT_QUOTA)
    return dominant_share(training, generation, snapshot, quota.share) + quota.recent
