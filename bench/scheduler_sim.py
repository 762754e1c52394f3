"""A simulated cluster driven by the controller's scheduler (backend/scheduler): jobs, Tinker-like sessions, ticks.

Every tick (`tick_s` seconds): arrivals join the queue, running items progress, items asked to hand back do so at
their next checkpoint or when the grace period ends (losing the iteration in progress plus a restart), then one
`decide(snapshot)` pass is applied: admissions, shrinks, preemptions, and free generation slots go to running jobs
below their target (the controller's instance scaling). Sessions alternate short active bursts (a waiting item that
takes one training slot while active) with long idle spells in which they are parked and hold nothing.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace

from backend.scheduler import Decisions, Running, Snapshot, TeamQuota, Waiting, decide, dominant_share
from backend.scheduler.history import decayed
from backend.scheduler.snapshot import NORMAL


@dataclass
class Work:
    id: int
    team: int
    priority: int
    training: int
    generation: int  # target instances
    generation_min: int
    submitted: float
    remaining_s: float  # run time left
    session: bool = False
    first_start: float | None = None
    started: float = 0.0
    held_generation: int = 0
    since_checkpoint: float = 0.0
    asked_at: float | None = None  # preemption requested


@dataclass
class Config:
    training_slots: int = 256
    generation_slots: int = 512
    hours: float = 24.0
    tick_s: float = 30.0
    checkpoint_s: float = 600.0
    iteration_s: float = 30.0
    grace_s: float = 60.0
    restart_s: float = 60.0  # reloading a handed-back job (device-seconds on each of its slots)
    policy: str = "fair"
    half_life_s: float = 3600.0


@dataclass
class Stats:
    waits: dict[int, list[float]] = field(default_factory=dict)  # priority -> first-start waits
    weighted: dict[int, list[float]] = field(default_factory=dict)  # team -> weighted shares while backlogged
    utilisation: list[float] = field(default_factory=list)
    used_device_s: float = 0.0
    lost_device_s: float = 0.0
    preemptions: int = 0
    pass_s: list[float] = field(default_factory=list)


class Cluster:
    def __init__(self, cfg: Config, teams: dict[int, TeamQuota], jobs: list[Work], sessions: list[Work],
                 seed: int) -> None:
        self.cfg, self.teams = cfg, teams
        self.future = sorted(jobs + sessions, key=lambda w: w.submitted, reverse=True)
        self.waiting: dict[int, Work] = {}
        self.running: dict[int, Work] = {}
        self.rng = random.Random(seed)
        self.stats = Stats()
        self.now = 0.0

    def run(self) -> Stats:
        end = self.cfg.hours * 3600
        while self.now < end:
            self._arrive()
            self._progress()
            snapshot = self._snapshot()
            began = time.perf_counter()  # the pass alone, not the simulation around it
            decisions = decide(snapshot)
            self.stats.pass_s.append(time.perf_counter() - began)
            self._apply(decisions)
            self._grow_generation()
            self._measure()
            self._remember()
            self.now += self.cfg.tick_s
        return self.stats

    def _arrive(self) -> None:
        while self.future and self.future[-1].submitted <= self.now:
            item = self.future.pop()
            self.waiting[item.id] = item

    def _progress(self) -> None:
        dt = self.cfg.tick_s
        for item in list(self.running.values()):
            slots = item.training + item.held_generation
            self.stats.used_device_s += slots * dt
            item.remaining_s -= dt
            item.since_checkpoint += dt
            if item.remaining_s <= 0:
                del self.running[item.id]
                if item.session:  # idle again: parked until its next burst
                    self._next_burst(item)
                continue
            crossed = item.since_checkpoint >= self.cfg.checkpoint_s
            if crossed:
                item.since_checkpoint -= self.cfg.checkpoint_s
            if item.asked_at is not None and (crossed or self.now - item.asked_at >= self.cfg.grace_s):
                partial = 0.0 if crossed else self.rng.uniform(0, self.cfg.iteration_s)  # hand-back checkpoints
                self.stats.lost_device_s += (partial + self.cfg.restart_s) * slots
                item.remaining_s += partial + self.cfg.restart_s
                item.asked_at, item.held_generation, item.since_checkpoint = None, 0, 0.0
                del self.running[item.id]
                self.waiting[item.id] = item
                self.stats.preemptions += 1

    def _remember(self) -> None:
        """The controller's per-pass update of each team's decayed standing."""
        held: dict[int, list[int]] = {}
        for r in self.running.values():
            h = held.setdefault(r.team, [0, 0])
            h[0], h[1] = h[0] + r.training, h[1] + r.held_generation
        snap = Snapshot(self.now, self.cfg.training_slots, self.cfg.generation_slots, self.teams, [], [])
        for team, quota in self.teams.items():
            t, g = held.get(team, [0, 0])
            now = dominant_share(t, g, snap, quota.share)
            recent = decayed(quota.recent, now, self.cfg.tick_s, self.cfg.half_life_s)
            self.teams[team] = replace(quota, recent=recent)

    def _next_burst(self, item: Work) -> None:
        item.submitted = self.now + self.rng.expovariate(1 / 1620)  # idle ~27 min, active ~3 min: 90% idle
        item.remaining_s = self.rng.expovariate(1 / 180) + self.cfg.tick_s
        self.future.append(item)
        self.future.sort(key=lambda w: w.submitted, reverse=True)

    def _snapshot(self) -> Snapshot:
        waiting = [Waiting(w.id, w.team, w.submitted, w.priority, w.training, w.generation, w.generation_min,
                           est_s=w.remaining_s) for w in self.waiting.values()]
        running = [Running(r.id, r.team, r.started, r.priority, r.training, r.held_generation, r.generation_min,
                           preemptible=True, est_end=self.now + r.remaining_s,
                           protected_until=r.started + self.cfg.checkpoint_s, preempting=r.asked_at is not None)
                   for r in self.running.values()]
        return Snapshot(self.now, self.cfg.training_slots, self.cfg.generation_slots, self.teams, running, waiting,
                        policy=self.cfg.policy)

    def _apply(self, decisions: Decisions) -> None:
        free_g = self.cfg.generation_slots - sum(r.held_generation for r in self.running.values())
        for rid, target in decisions.shrink.items():
            item = self.running[rid]
            free_g += item.held_generation - target
            item.held_generation = target
        for rid in decisions.preempt:
            self.running[rid].asked_at = self.now
        for wid in decisions.admit:
            item = self.waiting.pop(wid)
            item.started, item.since_checkpoint = self.now, 0.0
            item.held_generation = min(item.generation, free_g)
            free_g -= item.held_generation
            if item.first_start is None:
                item.first_start = self.now
                if not item.session:
                    self.stats.waits.setdefault(item.priority, []).append(self.now - item.submitted)
            self.running[wid] = item

    def _grow_generation(self) -> None:
        free_g = self.cfg.generation_slots - sum(r.held_generation for r in self.running.values())
        for item in sorted(self.running.values(), key=lambda r: r.started):
            if free_g <= 0:
                break
            if item.asked_at is None and item.held_generation < item.generation:
                add = min(free_g, item.generation - item.held_generation)
                item.held_generation += add
                free_g -= add

    def _measure(self) -> None:
        cfg = self.cfg
        used_t = sum(r.training for r in self.running.values())
        used_g = sum(r.held_generation for r in self.running.values())
        free_t, free_g = cfg.training_slots - used_t, cfg.generation_slots - used_g
        short_t = any(w.training > free_t for w in self.waiting.values())
        short_g = any(w.generation_min > free_g for w in self.waiting.values()) or \
            sum(r.generation - r.held_generation for r in self.running.values()) > free_g
        if short_t:
            self.stats.utilisation.append(used_t / cfg.training_slots)
        if short_g:
            self.stats.utilisation.append(used_g / cfg.generation_slots)
        if not (short_t or short_g):
            return
        # fairness within the normal class: high priority runs ahead of fair share by design (an admin's grant),
        # low priority is scavenger work on spare slots; neither is a claim to a share
        held: dict[int, list[int]] = {}
        for r in self.running.values():
            if r.priority == NORMAL:
                h = held.setdefault(r.team, [0, 0, 0, 0])
                h[0], h[1] = h[0] + r.training, h[1] + r.held_generation
        backlogged = set()
        for w in self.waiting.values():
            if w.priority == NORMAL:
                h = held.setdefault(w.team, [0, 0, 0, 0])
                h[2], h[3] = h[2] + w.training, h[3] + w.generation_min
                backlogged.add(w.team)
        share = {team: max(h[0] / cfg.training_slots, h[1] / cfg.generation_slots) for team, h in held.items()}
        demand = {team: max((h[0] + h[2]) / cfg.training_slots, (h[1] + h[3]) / cfg.generation_slots)
                  for team, h in held.items()}
        entitled = water_fill(demand, {team: self.teams[team].share for team in held}, sum(share.values()))
        for team in backlogged:
            if entitled[team] > 0:
                self.stats.weighted.setdefault(team, []).append(share[team] / entitled[team])


def water_fill(demand: dict[int, float], weight: dict[int, float], capacity: float) -> dict[int, float]:
    """Weighted max-min fair shares of `capacity`, each capped by its demand (the fair allocation to compare with)."""
    entitled: dict[int, float] = {}
    left, weights = capacity, sum(weight.values())
    for team in sorted(demand, key=lambda t: demand[t] / weight[t]):
        level = left / weights if weights else 0.0
        entitled[team] = min(demand[team], weight[team] * level)
        left -= entitled[team]
        weights -= weight[team]
    return entitled


def jain(values: list[float]) -> float:
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)]
