"""bench/modes.py's figures: a run's steady-state summary from its iteration records, the median run of several,
the disaggregation bound, and the RESULT lines of --partial-rollouts and --speculative."""

from __future__ import annotations

from typing import Any


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Steady-state figures (iteration 1 carries engine start-up) and the trainer's per-iteration breakdown:
    train (forward/backward/step), wait (for samples), weight sync (publish) and overhead (the rest: dispatch,
    checkpoint, bookkeeping); `gen` is the generation makespan, which overlaps training outside colocated."""
    steady = rows[1:] or rows
    seconds = sum(r["iteration_seconds"] for r in steady)

    def mean(key: str) -> float:
        return sum(float(r.get(key) or 0.0) for r in steady) / len(steady)

    breakdown = {"gen": mean("gen_seconds"), "train": mean("train_seconds"), "wait": mean("trainer_idle_seconds"),
                 "sync": mean("weight_sync_seconds")}
    iteration = seconds / len(steady)
    return {
        "samples_per_s": sum(r["samples"] for r in steady) / seconds,
        "iteration_s": iteration, **breakdown,
        "overhead": max(0.0, iteration - breakdown["train"] - breakdown["wait"] - breakdown["sync"]),
        "sync_fraction": breakdown["sync"] * len(steady) / seconds,
        "load_s": mean("weight_load_seconds"), "trainer_idle": breakdown["wait"] * len(steady) / seconds,
        "reward": rows[-1]["reward_mean"], "tail": mean("tail_fraction"), "long_tail": mean("long_tail_instances"),
        "reward_last3": sum(r["reward_mean"] for r in rows[-3:]) / len(rows[-3:]),
        "token_staleness": mean("token_staleness_mean"), "multi_version": mean("multi_version_fraction"),
        "tokens_per_s": sum(r["tokens_per_s"] * r["iteration_seconds"] for r in steady) / seconds,
        "len_p50": mean("len_p50"), "len_p90": mean("len_p90"),
    }


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median samples/s (its own breakdown, so the parts add up)."""
    ordered = sorted(runs, key=lambda r: r["samples_per_s"])
    return ordered[len(ordered) // 2]


def partial_result(results: dict[str, dict[str, float]], measured: dict[str, list[dict[str, float]]]) -> None:
    plain, partial = results["async+drain"], results["async+partial"]
    rewards = {key: sum(r["reward_last3"] for r in runs) / len(runs) for key, runs in measured.items()}
    for key, r in results.items():
        print(f"  {key:14s} {r['samples_per_s']:7.2f} samples/s (median run); iteration {r['iteration_s']:6.2f} s = "
              f"train {r['train']:.2f} + wait {r['wait']:.2f} + sync {r['sync']:.3f} + overhead {r['overhead']:.2f} "
              f"| generation {r['gen']:.2f}; token staleness {r['token_staleness']:.2f}, multi-version samples "
              f"{100 * r['multi_version']:.0f}%; {r['tokens_per_s']:.0f} tokens/s, length p50 {r['len_p50']:.0f} "
              f"p90 {r['len_p90']:.0f}; reward (last 3 iterations, mean of rounds) {rewards[key]:.3f}")
    print(f"RESULT partial_over_plain={partial['samples_per_s'] / plain['samples_per_s']:.3f} "
          f"plain={plain['samples_per_s']:.2f} partial={partial['samples_per_s']:.2f} "
          f"reward_plain={rewards['async+drain']:.3f} reward_partial={rewards['async+partial']:.3f} "
          f"tokens_partial_over_plain={partial['tokens_per_s'] / plain['tokens_per_s']:.3f}")


def speculative_result(results: dict[str, dict[str, float]], measured: dict[str, list[dict[str, float]]]) -> None:
    """`RESULT speculative`: samples/s with speculation over without (median runs), per mode, each round's ratio,
    the generation makespan's ratio, the CPU seconds per iteration of each pool, and the last iterations' reward."""
    def ratio(mode: str, key: str = "samples_per_s") -> float:
        return results[f"{mode}+group"][key] / results[f"{mode}+off"][key]

    def reward(arm: str) -> float:
        return (results[f"sync+{arm}"]["reward_last3"] + results[f"async+{arm}"]["reward_last3"]) / 2

    for key, r in results.items():
        cpu = " ".join(f"{k[4:]} {v:.2f}" for k, v in r.items() if k.startswith("cpu_"))
        print(f"  {key:11s} {r['samples_per_s']:6.2f} samples/s (median run): iteration {r['iteration_s']:.2f} s = "
              f"train {r['train']:.2f} + wait {r['wait']:.2f} + sync {r['sync']:.3f} + overhead {r['overhead']:.2f} | "
              f"generation {r['gen']:.2f} s; CPU s/iteration: {cpu}; length p50 {r['len_p50']:.0f} p90 "
              f"{r['len_p90']:.0f}; reward (last 3) {r['reward_last3']:.3f}")
    for mode in ("colocated", "sync", "async"):
        rounds = [g["samples_per_s"] / o["samples_per_s"]
                  for o, g in zip(measured[f"{mode}+off"], measured[f"{mode}+group"], strict=False)]
        print(f"  {mode} per-round ratios: " + " ".join(f"{x:.2f}" for x in rounds))
    print(f"RESULT speculative e2e_sync_ratio={ratio('sync'):.3f} e2e_async_ratio={ratio('async'):.3f} "
          f"e2e_colocated_ratio={ratio('colocated'):.3f} "
          f"reward_off={reward('off'):.3f} reward_group={reward('group'):.3f} "
          f"gen_sync_ratio={1 / ratio('sync', 'gen'):.3f} gen_async_ratio={1 / ratio('async', 'gen'):.3f} "
          f"gen_cpu_sync_ratio={1 / ratio('sync', 'cpu_generation'):.3f} "
          f"gen_cpu_async_ratio={1 / ratio('async', 'cpu_generation'):.3f} "
          + " ".join(f"{key.replace('+', '_')}={r['samples_per_s']:.2f}" for key, r in results.items()))


def disaggregation_bound(colocated: dict[str, float], split: dict[str, float]) -> tuple[float, float, float]:
    """(bound, gen_scaling, train_scaling). bound: the most a disaggregated mode can gain over colocated on the same
    cores, colocated's iteration over the longer of generation and training measured on the split's own core sets
    (they run at once, so an iteration cannot be shorter than either). The scalings: what colocated gains from
    holding every core in each phase."""
    return (colocated["iteration_s"] / max(split["gen"], split["train"], 1e-9),
            split["gen"] / max(colocated["gen"], 1e-9), split["train"] / max(colocated["train"], 1e-9))
