"""The controller's scheduler (backend/scheduler) on a simulated cluster, against FIFO (today's rule) in the same run.

    python bench/scheduler.py [--hours 24] [--jobs 2000] [--teams 64] [--sessions 200] [--seed 0] [--rounds 5]

Workload (seeded): 64 teams with fair-share weights 1-8; 2,000 RL jobs arriving over the first 12 hours with
heavy-tailed run times (Pareto, alpha 1.3, 15 min to 12 h), gangs of 1-16 training slots, 0-32 generation instances
(elastic down to a quarter), priorities 80% normal / 15% low / 5% high; 200 Tinker-like sessions, idle 90% of the
time (a parked session holds no slot), each burst a one-slot waiting item. Cluster: 256 training and 512
generation slots, one scheduling pass every 30 s, checkpoints every 600 s, hand-back grace 60 s, a hand-back costs
the iteration in progress plus a 60 s restart on every slot the job held. The same workload runs under
policy "fair" (priority, weighted DRF, backfill, preemption) and "fifo" (submit order, head-of-line blocking).

Figures:
  jain            Jain's index over the teams' fairness ratios: each tick a pool is short, every team with normal-
                  priority work waiting gets held / entitled, where held is its weighted dominant share of the slots
                  its normal-priority jobs hold and entitled its weighted max-min fair share (water-filling, capped
                  by what it holds plus what it waits for); a team's ratio is averaged over those ticks, over the
                  teams backlogged an hour or more in all (jain_5min: five minutes or more). High priority runs
                  ahead of fair share by design, low priority is scavenger work: neither is a claim to a share.
  utilisation     slots in use / slots, over the ticks a pool was short (items waiting for it)
  high_wait_p99_s p99 of high-priority jobs' submit-to-start waits (target: checkpoint interval + grace = 660 s)
  preempt_loss    device-seconds lost to hand-backs (the iteration in progress + a 60 s restart, on every slot
                  the job held) / device-seconds used
  pass_ms         median CPU time (process_time) of one decide() on a snapshot with 10,000 waiting and the cluster
                  full, interleaved with the FIFO pass over --rounds rounds (fifo_pass_ms); wall time on an idle
                  core is the same, on a loaded host it adds the wait for a core

    RESULT jain=... fifo_jain=... utilisation=... high_wait_p99_s=... preempt_loss=... pass_ms=... ...
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_sim import Cluster, Config, Stats, Work, jain, percentile  # noqa: E402  (bench/, the script's directory)

from backend.scheduler import PRIORITY_RANK, Running, Snapshot, TeamQuota, Waiting, decide  # noqa: E402

SIZES = (1, 1, 1, 1, 2, 2, 4, 4, 8, 16)


def workload(args: argparse.Namespace) -> tuple[dict[int, TeamQuota], list[Work], list[Work]]:
    rng = random.Random(args.seed)
    teams = {t: TeamQuota(share=float(rng.randint(1, 8))) for t in range(args.teams)}
    hot = rng.sample(range(args.teams), args.teams // 4)  # a quarter of the teams submit half the jobs
    jobs: list[Work] = []
    for i in range(args.jobs):
        team = rng.choice(hot) if rng.random() < 0.5 else rng.randrange(args.teams)
        training = rng.choice(SIZES)
        generation = rng.choice((0, training, 2 * training))
        priority = rng.choices(("normal", "low", "high"), (80, 15, 5))[0]
        run_s = min(12 * 3600.0, 900.0 * rng.paretovariate(1.3))
        jobs.append(Work(i, team, PRIORITY_RANK[priority], training, generation, max(0, generation // 4) if
                         generation == 0 else max(1, generation // 4), rng.uniform(0, args.hours * 3600 / 2),
                         run_s))
    sessions = [Work(args.jobs + k, rng.randrange(args.teams), PRIORITY_RANK["normal"], 1, 0, 0,
                     rng.uniform(0, 1800), rng.expovariate(1 / 180) + 30, session=True) for k in range(args.sessions)]
    return teams, jobs, sessions


def simulate(args: argparse.Namespace, policy: str) -> Stats:
    teams, jobs, sessions = workload(args)  # fresh copies: the run mutates them
    return Cluster(Config(hours=args.hours, policy=policy), teams, jobs, sessions, args.seed).run()


def fairness(stats: Stats, min_ticks: int = 120) -> float:
    """Jain over the teams backlogged at least `min_ticks` ticks (120: an hour of the day; 10: five minutes, which
    counts teams whose only wait was for their first admission, when they hold nothing by construction)."""
    ratios = [sum(values) / len(values) for values in stats.weighted.values() if len(values) >= min_ticks]
    return jain(ratios)


def big_snapshot(args: argparse.Namespace, policy: str) -> Snapshot:
    rng = random.Random(args.seed + 1)
    teams = {t: TeamQuota(share=float(rng.randint(1, 8))) for t in range(args.teams)}
    running = [Running(i, rng.randrange(args.teams), rng.uniform(0, 3600), rng.randint(0, 2), 1, 2, 1,
                       est_end=rng.uniform(3600, 90000)) for i in range(256)]
    waiting = [Waiting(1000 + i, rng.randrange(args.teams), rng.uniform(0, 3600),
                       rng.choices((0, 1, 2), (15, 80, 5))[0], rng.choice(SIZES), rng.choice((0, 2, 4)), 1,
                       rng.uniform(600, 43200)) for i in range(10_000)]
    return Snapshot(7200.0, 256, 512, teams, running, waiting, policy=policy)


def pass_times(args: argparse.Namespace) -> tuple[float, float]:
    fair, fifo = big_snapshot(args, "fair"), big_snapshot(args, "fifo")
    times: dict[str, list[float]] = {"fair": [], "fifo": []}
    for _ in range(args.rounds):  # interleaved
        for name, snapshot in (("fair", fair), ("fifo", fifo)):
            began = time.process_time()  # CPU time: the pass's own cost, not the wait for a core on a busy host
            decide(snapshot)
            times[name].append(time.process_time() - began)
    return statistics.median(times["fair"]) * 1000, statistics.median(times["fifo"]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--teams", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = {policy: simulate(args, policy) for policy in ("fair", "fifo")}
    for policy, stats in results.items():
        high = stats.waits.get(PRIORITY_RANK["high"], [])
        print(f"{policy:5s} jain={fairness(stats):.3f} utilisation={statistics.mean(stats.utilisation):.3f} "
              f"high_wait_p50_s={percentile(high, 0.5):.0f} high_wait_p99_s={percentile(high, 0.99):.0f} "
              f"jobs_started={sum(len(v) for v in stats.waits.values())} preemptions={stats.preemptions} "
              f"loss={stats.lost_device_s / max(stats.used_device_s, 1):.4f} "
              f"sim_pass_ms_p50={statistics.median(stats.pass_s) * 1000:.2f}")
    fair, fifo = results["fair"], results["fifo"]
    pass_ms, fifo_pass_ms = pass_times(args)
    high = fair.waits.get(PRIORITY_RANK["high"], [])
    fifo_high = fifo.waits.get(PRIORITY_RANK["high"], [])
    print(f"RESULT jain={fairness(fair):.3f} fifo_jain={fairness(fifo):.3f} jain_5min={fairness(fair, 10):.3f} "
          f"fifo_jain_5min={fairness(fifo, 10):.3f} "
          f"utilisation={statistics.mean(fair.utilisation):.3f} "
          f"fifo_utilisation={statistics.mean(fifo.utilisation):.3f} "
          f"high_wait_p99_s={percentile(high, 0.99):.0f} fifo_high_wait_p99_s={percentile(fifo_high, 0.99):.0f} "
          f"preempt_loss={fair.lost_device_s / max(fair.used_device_s, 1):.4f} pass_ms={pass_ms:.1f} "
          f"fifo_pass_ms={fifo_pass_ms:.1f}")


if __name__ == "__main__":
    main()
