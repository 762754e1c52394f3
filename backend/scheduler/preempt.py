"""Making room for waiting items that outrank running ones.

W outranks R when W's priority is higher, or at equal priority when R's team is over its fair share by more than the
hysteresis and richer (by the hysteresis) than W's team will be with W started (Kueue's
"LessThanOrEqualToFinalShare"): R's team, once R waits, cannot outrank W back, so the two never swap. Shares are
weighted dominant shares; the fair share is 1 / (sum of the weights of teams with work), what every team would hold
if all wanted the whole cluster.

For each blocked item in queue order (the first `preempt_scan`), with the slots already on their way back counted:
1. shrink outranked jobs' elastic generation instances (down to their minimum), richest team first;
2. then ask outranked preemptible jobs to hand back at their next checkpoint: lowest priority first, then the
   richest team, then the youngest (least work since its checkpoint). A job still protected (before its first
   checkpoint) is never chosen. Victims are taken only if they cover the item's whole shortfall.
"""

from __future__ import annotations

from collections.abc import Callable

from backend.scheduler.snapshot import (
    DEFAULT_QUOTA,
    PRIORITIES,
    Decisions,
    Pools,
    Running,
    Snapshot,
    Waiting,
    standing,
)


def plan_preemptions(snapshot: Snapshot, blocked: list[tuple[Waiting, float]], usage: dict[int, list[int]], free: Pools,
                     decisions: Decisions) -> None:
    if not blocked:
        return
    active = {r.team for r in snapshot.running} | {w.team for w in snapshot.waiting}
    fair = 1.0 / sum(snapshot.teams.get(team, DEFAULT_QUOTA).share for team in active)
    held = {team: list(values[:2]) for team, values in usage.items()}

    standings: dict[int, float] = {}  # per team, dropped whenever its `held` changes

    def share(team: int) -> float:
        if team not in standings:
            t, g = held.get(team, (0, 0))[:2]
            standings[team] = standing(t, g, snapshot, team)
        return standings[team]

    avail = [free.training, free.generation]
    for r in snapshot.running:  # slots already on their way back
        if r.preempting:
            avail[0], avail[1] = avail[0] + r.training, avail[1] + r.generation
    candidates = sorted((r for r in snapshot.running if not r.preempting),
                        key=lambda r: (r.priority, -share(r.team), -r.started))
    taken: set[int] = set()
    teams = {r.id: r.team for r in snapshot.running}
    for item, start in blocked[:snapshot.preempt_scan]:
        short_t, short_g = item.training - avail[0], item.generation_min - avail[1]
        if (short_t > 0 or short_g > 0) and start - snapshot.now > snapshot.grace_s:
            victims = _outranked(snapshot, item, candidates, taken, share, fair, held)
            shrink = _shrink_plan(victims, max(short_g, 0), decisions.shrink)
            freed_g = sum(current - target for current, target in shrink.values())
            chosen = _hand_backs(snapshot, victims, max(short_t, 0), max(short_g - freed_g, 0), decisions.shrink)
            if chosen is None:
                continue  # not enough outranked work to make room now: it waits for slots to free up
            for r in chosen:
                shrink.pop(r.id, None)
                current = decisions.shrink.pop(r.id, r.generation)
                taken.add(r.id)
                avail[0], avail[1] = avail[0] + r.training, avail[1] + current
                held[r.team][0] -= r.training
                held[r.team][1] -= current
                standings.pop(r.team, None)
                decisions.preempt[r.id] = _why(item, r)
            for rid, (current, target) in shrink.items():
                decisions.shrink[rid] = target
                avail[1] += current - target
                held[teams[rid]][1] -= current - target
                standings.pop(teams[rid], None)
        avail[0], avail[1] = avail[0] - item.training, avail[1] - item.generation_min
        team = held.setdefault(item.team, [0, 0])
        team[0], team[1] = team[0] + item.training, team[1] + item.generation_min
        standings.pop(item.team, None)


def _outranked(snapshot: Snapshot, item: Waiting, candidates: list[Running], taken: set[int],
               share: Callable[[int], float], fair: float, held: dict[int, list[int]]) -> list[Running]:
    t, g = held.get(item.team, (0, 0))[:2]
    mine_after = standing(t + item.training, g + item.generation_min, snapshot, item.team)
    out: list[Running] = []
    for r in candidates:  # sorted by priority: stop once nothing further can be outranked
        if r.priority > item.priority:
            break
        if r.id in taken:
            continue
        if r.priority < item.priority:
            out.append(r)
            continue
        theirs = share(r.team)
        if r.team != item.team and theirs > fair * (1 + snapshot.hysteresis) and \
                theirs > mine_after * (1 + snapshot.share_margin):
            out.append(r)
    return out


def _shrink_plan(victims: list[Running], short: int, shrunk: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Elastic generation targets to lower (never under their minimum): id -> (current, new)."""
    plan: dict[int, tuple[int, int]] = {}
    freed = 0
    for r in victims:
        if freed >= short:
            break
        current = shrunk.get(r.id, r.generation)
        take = min(current - r.generation_min, short - freed)
        if take > 0:
            plan[r.id] = (current, current - take)
            freed += take
    return plan


def _hand_backs(snapshot: Snapshot, victims: list[Running], short_t: int, short_g: int,
                shrunk: dict[int, int]) -> list[Running] | None:
    if short_t <= 0 and short_g <= 0:
        return []
    chosen: list[Running] = []
    for r in victims:
        if not r.preemptible or r.protected_until > snapshot.now or r.est_end - snapshot.now < snapshot.finishing_s:
            continue  # pinned, before its first checkpoint, or about to end anyway (a restart would cost more)
        holds = shrunk.get(r.id, r.generation)
        if (short_t <= 0 or r.training == 0) and (short_g <= 0 or holds == 0):
            continue  # it holds nothing the item lacks
        chosen.append(r)
        short_t -= r.training
        short_g -= holds
        if short_t <= 0 and short_g <= 0:
            return chosen
    return None


def _why(item: Waiting, victim: Running) -> str:
    whose = "your team" if item.team == victim.team else "another team"
    if item.priority > victim.priority:
        return (f"preempted for a {PRIORITIES[item.priority]}-priority job of {whose} (this job is "
                f"{PRIORITIES[victim.priority]} priority); it resumes from this checkpoint when slots free up")
    return ("preempted for fair share: another team is under its weighted share of the slots while yours is over "
            "it; the job resumes from this checkpoint when slots free up")
