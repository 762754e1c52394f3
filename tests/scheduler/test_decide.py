"""The scheduler's pure decision (backend/scheduler): order, DRF, backfill, preemption choice, no thrash, reasons."""

from __future__ import annotations

import math

from backend.scheduler import PRIORITY_RANK, Running, Snapshot, TeamQuota, Waiting, decide

LOW, NORMAL, HIGH = PRIORITY_RANK["low"], PRIORITY_RANK["normal"], PRIORITY_RANK["high"]


def snap(waiting: list[Waiting], running: list[Running] | None = None, *, training: int = 1, generation: int = 0,
         teams: dict[int, TeamQuota] | None = None, now: float = 1000.0, **kw: object) -> Snapshot:
    teams = teams or {t: TeamQuota() for t in {w.team for w in waiting} | {r.team for r in running or []}}
    return Snapshot(now, training, generation, teams, running or [], waiting, **kw)  # type: ignore[arg-type]


def order(decisions_queue: dict[int, object]) -> list[int]:
    return [i for i, _ in sorted(decisions_queue.items(), key=lambda kv: kv[1].position)]  # type: ignore[attr-defined]


def test_two_teams_alternate_by_fair_share_not_submit_order() -> None:
    waiting = [Waiting(i, team=1, submitted=i) for i in range(3)] + [Waiting(10 + i, team=2, submitted=10 + i)
                                                                   for i in range(3)]
    d = decide(snap(waiting))
    assert d.admit == [0]
    assert order(d.queue) == [10, 1, 11, 2, 12]  # team 2 first: team 1 holds the slot
    assert d.queue[10].position == 1 and d.queue[10].waiting_for == "training_slots"
    assert "needs 1, 0 of 1 free" in d.queue[10].reason


def test_priority_comes_before_share_and_submit_time() -> None:
    waiting = [Waiting(1, team=1, submitted=0, priority=LOW), Waiting(2, team=2, submitted=5, priority=HIGH),
               Waiting(3, team=3, submitted=1)]
    assert decide(snap(waiting, training=0)).queue.keys() and order(decide(snap(waiting, training=0)).queue) == \
        [2, 3, 1]


def test_weights_split_the_queue_in_proportion() -> None:
    teams = {1: TeamQuota(share=3.0), 2: TeamQuota(share=1.0)}
    waiting = [Waiting(t * 100 + i, team=t, submitted=i) for t in (1, 2) for i in range(8)]
    d = decide(snap(waiting, training=8, teams=teams))
    admitted_teams = [w // 100 for w in d.admit]
    assert admitted_teams.count(1) == 6 and admitted_teams.count(2) == 2


def test_dominant_share_counts_generation_slots() -> None:
    # team 1 holds 4 of 6 generation slots (its dominant share), team 2 one training slot of two: team 2 is poorer
    running = [Running(50, team=1, started=0, training=0, generation=4), Running(51, team=2, started=0)]
    waiting = [Waiting(1, team=1, submitted=0), Waiting(2, team=2, submitted=1)]
    d = decide(snap(waiting, running, training=2, generation=6))
    assert d.admit == [2]
    assert d.queue[1].position == 1


def test_backfill_only_when_it_does_not_delay_the_head() -> None:
    running = [Running(50, team=9, started=0, training=2, est_end=1600)]  # frees 2 slots in 600 s
    head = Waiting(1, team=1, submitted=0, training=4)
    short = Waiting(2, team=2, submitted=1, est_s=300)  # ends before the head could start: backfills
    long = Waiting(3, team=3, submitted=2, est_s=5000)  # would hold a slot the head needs at 1600
    d = decide(snap([head, short, long], running, training=4))
    assert d.admit == [2]
    assert d.queue[1].eta_s == 600
    assert "held for a job ahead in the queue" in d.queue[3].reason


def test_backfill_into_slots_the_head_leaves_over() -> None:
    running = [Running(50, team=9, started=0, training=2, est_end=1600)]
    head = Waiting(1, team=1, submitted=0, training=2)  # at 1600: 1 free + 2 freed, it needs 2 -> 1 spare
    long = Waiting(3, team=3, submitted=2, est_s=math.inf)
    assert decide(snap([head, long], running, training=3)).admit == [3]


def test_fifo_blocks_behind_the_head_and_quota_holds_nobody_up() -> None:
    teams = {1: TeamQuota(max_jobs=0), 2: TeamQuota(), 9: TeamQuota()}
    waiting = [Waiting(1, team=1, submitted=0), Waiting(2, team=2, submitted=1, training=2),
               Waiting(3, team=2, submitted=2, est_s=1)]
    running = [Running(50, team=9, started=0, est_end=5000)]
    d = decide(snap(waiting, running, training=2, teams=teams, policy="fifo"))
    assert d.admit == []  # job 2 (gang of 2) blocks job 3 under FIFO
    assert d.queue[1].waiting_for == "quota:max_concurrent_jobs"
    assert "max_concurrent_jobs (0)" in d.queue[1].reason
    assert decide(snap(waiting, running, training=2, teams=teams)).admit == [3]  # fair: backfills (ends at once)


def test_an_item_larger_than_the_pool_holds_nobody_up() -> None:
    d = decide(snap([Waiting(1, team=1, submitted=0, training=5), Waiting(2, team=2, submitted=1)], training=2))
    assert d.admit == [2]
    assert "the pool has 2" in d.queue[1].reason and d.queue[1].eta_s is None


def test_high_priority_preempts_the_lowest_priority_preemptible_job() -> None:
    running = [Running(50, team=1, started=0, priority=NORMAL), Running(51, team=2, started=0, priority=LOW),
               Running(52, team=2, started=0, priority=LOW, preemptible=False)]
    d = decide(snap([Waiting(1, team=3, submitted=500, priority=HIGH)], running, training=3))
    assert list(d.preempt) == [51]
    assert "high-priority job of another team" in d.preempt[51] and "1" not in d.preempt[51].split("(")[0]


def test_a_job_before_its_first_checkpoint_is_not_preempted() -> None:
    running = [Running(51, team=2, started=900, priority=LOW, protected_until=1500)]
    assert decide(snap([Waiting(1, team=3, submitted=950, priority=HIGH)], running)).preempt == {}


def test_nothing_preempted_when_a_slot_frees_within_the_grace_period() -> None:
    running = [Running(51, team=2, started=0, priority=LOW, est_end=1030)]
    assert decide(snap([Waiting(1, team=3, submitted=950, priority=HIGH)], running, grace_s=60)).preempt == {}


def test_slots_already_handed_back_are_counted() -> None:
    running = [Running(51, team=2, started=0, priority=LOW, preempting=True),
               Running(52, team=2, started=0, priority=LOW)]
    assert decide(snap([Waiting(1, team=3, submitted=950, priority=HIGH)], running, training=2)).preempt == {}


def test_shrink_elastic_generation_before_preempting() -> None:
    running = [Running(51, team=2, started=0, training=1, generation=4, generation_min=1, priority=LOW)]
    d = decide(snap([Waiting(1, team=3, submitted=950, training=1, generation=2, generation_min=2, priority=HIGH)],
                    running, training=2, generation=4))
    assert d.shrink == {51: 2} and d.preempt == {}


def test_fair_share_preemption_and_no_swap_back() -> None:
    teams = {1: TeamQuota(), 2: TeamQuota()}
    running = [Running(50 + i, team=1, started=0) for i in range(4)]  # team 1 holds the whole pool
    d = decide(snap([Waiting(1, team=2, submitted=10)], running, training=4, teams=teams))
    assert len(d.preempt) == 1
    assert "fair share" in next(iter(d.preempt.values()))
    # after the swap, team 1 (3 slots) waits with one job and team 2 holds 1: team 1 must not preempt back
    running = [Running(50 + i, team=1, started=0) for i in range(3)] + [Running(60, team=2, started=0)]
    assert decide(snap([Waiting(53, team=1, submitted=0)], running, training=4, teams=teams)).preempt == {}


def test_share_within_the_margin_preempts_nobody() -> None:
    teams = {1: TeamQuota(), 2: TeamQuota()}
    running = [Running(50, team=1, started=0), Running(51, team=1, started=0), Running(52, team=2, started=0)]
    assert decide(snap([Waiting(1, team=2, submitted=10)], running, training=3, teams=teams)).preempt == {}


def test_recent_use_orders_teams_between_equal_holdings() -> None:
    teams = {1: TeamQuota(recent=0.5), 2: TeamQuota(recent=0.0)}
    d = decide(snap([Waiting(1, team=1, submitted=0), Waiting(2, team=2, submitted=5)], training=1, teams=teams))
    assert d.admit == [2]


def test_quota_generation_cap() -> None:
    teams = {1: TeamQuota(max_generation=2)}
    running = [Running(50, team=1, started=0, training=0, generation=2)]
    d = decide(snap([Waiting(1, team=1, submitted=0, generation=1, generation_min=1)], running, training=2,
                    generation=8, teams=teams))
    assert d.admit == [] and d.queue[1].waiting_for == "quota:max_generation_instances"


def test_ten_thousand_items_in_one_pass() -> None:
    waiting = [Waiting(i, team=i % 64, submitted=float(i), priority=i % 3, training=1 + i % 4) for i in range(10_000)]
    running = [Running(20_000 + i, team=i % 64, started=0, est_end=2000 + i) for i in range(256)]
    d = decide(snap(waiting, running, training=256, generation=512))
    assert len(d.queue) == 10_000 and sorted(q.position for q in d.queue.values()) == list(range(1, 10_001))
