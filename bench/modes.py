"""Colocated vs sync vs async StreamRL on this machine: same model, task, seed and sample budget.

See docs/architecture.md#sync-and-async-pipelining.

    python bench/modes.py [--iterations 30 --repeats 3 --cores 2 --gen-cores 1 --instances 1 --prompts 8 --group 8]
                          [--profile DIR]   (py-spy flame graphs of each configuration's first run)
    python bench/modes.py --skew-only --preset tiny-15m --instances 2   (sync: random vs skew_aware dispatch)
    python bench/modes.py --bf16 --token-budget 1024   (every mode with the cheaper training options)
    python bench/modes.py --configs colocated,sync --instances 2 --sync-shares-cores   (sync taking turns on all cores)
    python bench/modes.py --partial-rollouts [--engine vllm]   (async: in-flight weight updates vs draining)
    python bench/modes.py --device cuda ...   (on a GPU machine: every pool on GPU 0 instead of core sets)

Runs the real platform, self-contained: SQLite + an embedded Redis in a temp dir, `streamrl worker` PROCESSES pinned
to device sets (core sets here), and the controller's reconcile loop. Every mode gets the same `--cores`: colocated
runs on all of them (one process, as many threads as cores); sync/async give `--gen-cores` to the generation pool
(split over `--instances`) and the rest to the trainer. A tiny Llama is SFT-warmed briefly on the long_tail task so
response lengths are heavy-tailed and follow the prompt. Each configuration trains the same
`iterations x prompts x group` samples from the same weights:
  colocated    one process alternates generation and training (the baseline: verl's time-sharing)
  sync         trainer + `--instances` generation instances, dynamic-batch pipelining, on-policy (random dispatch)
  async        generation runs one step ahead on the previous weights (max_staleness 1, random dispatch)
  skew_aware   sync and async again with skew-aware dispatch (Algorithm 2 + longest-first) instead of random
The configurations run `--repeats` interleaved rounds; each reports its median run, with the trainer's iteration
broken down into train + wait (for samples) + weight sync + overhead, and the generation makespan.

    python bench/modes.py --learn [--learn-iterations 160]

checks learning instead of speed: the RL core's learning setup (bench/learn.py: tiny Llama SFT-warmed on one-digit
addition, GRPO lr 2e-4, exact-match reward, temperature 1) run as platform jobs in colocated, sync and async mode;
prints the mean training reward of the first and last 10 iterations of each and ends with
`RESULT learn colocated=A->B sync=C->D async=E->F`.

    python bench/modes.py --partial-rollouts [--max-tokens 512 --iterations 12 --max-staleness 2]

compares async mode with in-flight weight updates (`generation.partial_rollouts: true`: unfinished sequences continue
on the new weights) against async mode that drains at each update (false: the instance admits nothing until its
batch has finished, then loads), on a generation-bound long-tail shape (long max_tokens; the long_tail task's lengths
are heavy-tailed). Same iterations each; ends with `RESULT partial_over_plain=<samples/s ratio> reward_plain=...
reward_partial=...` (reward: mean training reward of the last 3 iterations, averaged over the rounds). Both run at
`--max-staleness` (default 1, the paper's; in-flight updates gain most when generation may run further ahead).
samples/s = samples / wall time of iterations 2..N (iteration 1 carries engine start-up). The weight-sync fraction is
the trainer's publish time (on its critical path) over the iteration time; `load` is the instances' load time.

    python bench/modes.py --object-store [--weight-sync shared_store --configs colocated,async]

runs every process with `STREAMRL_ARTIFACTS=s3://...` on a SeaweedFS server started here (tests/object_store.py):
weight versions (shared_store) and checkpoints go through the object store (uploaded behind the trainer; the
instances here share the trainer's host and read its versions before their upload ends). The RESULT line then also
says `artifacts=s3`; `weight_sync_fraction_async` is the figure the object store must keep <= 0.02.

    python bench/modes.py --speculative [--max-tokens 256] [--max-k 128 --max-tokens 512] [--lora 8]

runs colocated, sync and async with `generation.speculative` off and group (grouped speculative decoding, interleaved,
the order reversed every other round) and ends with `RESULT speculative e2e_sync_ratio=... e2e_async_ratio=...
e2e_colocated_ratio=... reward_off=... reward_group=... gen_*_ratio=... gen_cpu_*_ratio=...` (generation makespan and
the generation process's CPU seconds per iteration, without over with; bench/speculative.py --e2e runs it). `--max-k K`:
long_tail prompts (and the SFT rows) with repeat counts up to K, an uploaded dataset: a longer tail. Every run also
reports each pool's CPU seconds per steady iteration (the machine may be shared: wall clock is noisy, CPU time much
less).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PARTIAL = {"async+drain": False, "async+partial": True}  # --partial-rollouts: generation.partial_rollouts per config
SPECULATIVE = {"colocated+off": "off", "colocated+group": "group", "sync+off": "off", "sync+group": "group",
               "async+off": "off", "async+group": "group"}  # --speculative
sys.path.insert(0, str(REPO))
from modes_figures import (  # noqa: E402
    disaggregation_bound,
    median_run,
    partial_result,
    speculative_result,
    summary,
)
from modes_platform import (  # noqa: E402  (bench/, the script's directory)
    configure,
    cpu_seconds,
    learn_dataset,
    long_tail_dataset,
    profile_workers,
    run_job,
    start_workers,
    stop_profiles,
)
from processes import child_pythonpath, stop_process_groups  # noqa: E402


def layout(mode: str, cores: int, gen_cores: int, instances: int) -> dict[str, str]:
    """Device sets per pool at the same total cores: colocated gets every core (one process generates and trains);
    a disaggregated mode gives `gen_cores` to the generation pool, split evenly over its instances, and the rest
    to the trainer."""
    if mode == "colocated":
        return {"training": f"0-{cores - 1}"}
    if not 0 < gen_cores < cores or gen_cores % instances:
        raise SystemExit(f"--gen-cores {gen_cores} must be in 1..{cores - 1} and divisible by --instances {instances}")
    per = gen_cores // instances
    sets = ";".join(f"{i * per}-{(i + 1) * per - 1}" for i in range(instances))
    return {"generation": sets, "training": f"{gen_cores}-{cores - 1}"}


def shared_layout(cores: int, instances: int) -> dict[str, str]:
    """Sync mode only (generation and training take turns): the instances split every core, the trainer gets all."""
    if cores % instances:
        raise SystemExit(f"--cores {cores} must be divisible by --instances {instances}")
    per = cores // instances
    return {"generation": ";".join(f"{i * per}-{(i + 1) * per - 1}" for i in range(instances)),
            "training": f"0-{cores - 1}"}


def gpu_layout(mode: str, instances: int) -> dict[str, str]:
    """One GPU: every instance and the trainer on GPU 0 (colocated: the trainer alone)."""
    if mode == "colocated":
        return {"training": "0"}
    return {"generation": ";".join("0" for _ in range(instances)), "training": "0"}


def _spec(args: argparse.Namespace, mode: str, policy: str, instances: int) -> dict[str, Any]:
    return {
        "name": f"bench-{mode}-{policy}-{instances}", "model": "bench", "mode": mode,
        "max_staleness": args.max_staleness, "seed": 0,
        "dataset": ({"id": args.dataset_id, "eval_prompts": 0} if args.dataset_id is not None
                    else {"builtin": "long_tail", "num_prompts": 256, "eval_prompts": 0}),
        "reward": {"type": "exact_match"}, "algorithm": {"name": "grpo", "group_size": args.group},
        "generation": {"instances": instances, "batch_size": args.gen_batch, "max_tokens": args.max_tokens,
                       "engine": args.engine},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts,
                     "micro_batch_size": args.micro_batch, "lr": 1e-4, "bf16_autocast": True if args.bf16 else None,
                     "max_tokens_per_micro_batch": args.token_budget,
                     "weight_sync": "shared_store" if mode == "colocated" else args.weight_sync,
                     **({"lora": {"rank": args.lora}} if args.lora else {})},
        "dispatch": {"policy": policy}, "checkpoint": {"interval": 10_000},
    }


def _learn(args: argparse.Namespace, team_id: int, user_id: int, dataset_id: int | None) -> None:
    curves = {}
    for mode in ("colocated", "sync", "async"):
        spec = {"name": f"learn-{mode}", "model": "bench", "mode": mode, "max_staleness": args.max_staleness, "seed": 0,
                "dataset": {"id": dataset_id, "eval_prompts": 0}, "reward": {"type": "exact_match"},
                "algorithm": {"name": "grpo", "group_size": 8},
                "generation": {"instances": args.instances, "batch_size": 128, "max_tokens": 5, "temperature": 1.0},
                "training": {"iterations": args.learn_iterations, "prompts_per_iteration": 16,
                             "micro_batch_size": 32, "lr": 2e-4},
                "checkpoint": {"interval": 10_000}}
        rewards = [r["reward_mean"] for r in run_job(team_id, user_id, spec, args.timeout)]
        first, last = sum(rewards[:10]) / len(rewards[:10]), sum(rewards[-10:]) / len(rewards[-10:])
        curves[mode] = (first, last)
        print(f"{mode:10s} reward first10={first:.3f} last10={last:.3f} gain={last - first:+.3f}  "
              + " ".join(f"{r:.2f}" for r in rewards[::5]), flush=True)
    print("RESULT learn " + " ".join(f"{m}={a:.3f}->{b:.3f}" for m, (a, b) in curves.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--instances", type=int, default=1, help="generation instances of sync/async")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="cores every mode gets in total")
    parser.add_argument("--gen-cores", type=int, default=0, help="cores of the generation pool (default: half)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--weight-sync", default="p2p", choices=["p2p", "shared_store", "auto"],
                        help="transport of sync/async (colocated shares one process: no transport)")
    parser.add_argument("--sft-seconds", type=float, default=45.0)
    parser.add_argument("--model", help="a warmed model directory to use instead of the SFT warm start")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--verbose", action="store_true", help="print every iteration's timings")
    parser.add_argument("--profile", help="write py-spy flame graphs of each configuration's first run here")
    parser.add_argument("--profile-format", default="flamegraph", choices=("flamegraph", "raw"),
                        help="--profile's files: SVG flame graphs, or raw collapsed stacks (text)")
    parser.add_argument("--preset", default="tiny-1m", help="tiny Llama size (workers/models/tiny.py)")
    parser.add_argument("--skew-only", action="store_true",
                        help="sync mode only, random vs skew_aware dispatch; instances split every core and the "
                             "trainer shares them (sync takes turns)")
    parser.add_argument("--sync-shares-cores", action="store_true",
                        help="sync configurations use the --skew-only layout: --instances split every core and the "
                             "trainer gets all of them (sync mostly takes turns; threads overlap only while the "
                             "trainer trains streamed micro-batches during generation)")
    parser.add_argument("--configs", default="",
                        help="comma list of the configurations to run (colocated is always needed: the baseline); "
                             "default: colocated,sync,async,sync+skew,async+skew")
    parser.add_argument("--gen-batch", type=int, default=64,
                        help="generation.batch_size: sequences an instance decodes at once (fewer than it is sent: "
                             "they queue, and which instance gets the long tail decides the makespan)")
    parser.add_argument("--micro-batch", type=int, default=16,
                        help="training.micro_batch_size: a micro-step starts when this many samples have streamed "
                             "in (prompts x group: training starts after the whole batch)")
    parser.add_argument("--bf16", action="store_true",
                        help="every mode trains with bf16 autocast (training.bf16_autocast; default: the platform's "
                             "choice, float32 on CPUs)")
    parser.add_argument("--token-budget", type=int, default=None,
                        help="every mode's training.max_tokens_per_micro_batch (0: cut by count only); default: the "
                             "platform's choice at job start")
    parser.add_argument("--learn", action="store_true", help="check that reward rises in every mode (arithmetic)")
    parser.add_argument("--learn-iterations", type=int, default=160)
    parser.add_argument("--engine", default="hf", choices=["hf", "vllm"],
                        help="generation engine of sync/async (vllm: scripts/install_vllm.sh)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="cuda: every pool's processes on GPU 0, generation and training sharing it (--cores, "
                             "--gen-cores unused)")
    parser.add_argument("--max-staleness", type=int, default=1,
                        help="async: how many versions generation may run ahead (every configuration)")
    parser.add_argument("--partial-rollouts", action="store_true",
                        help="async only: in-flight weight updates (partial rollouts) vs draining at each update")
    parser.add_argument("--object-store", action="store_true",
                        help="artifacts (weight versions, checkpoints) through a SeaweedFS S3 server started here")
    parser.add_argument("--max-k", type=int, default=0,
                        help="long_tail prompts (and the SFT warm start's rows) with repeat counts up to this "
                             "(an uploaded dataset; 0: the built-in task's, up to 32): a longer tail")
    parser.add_argument("--lora", type=int, default=0, help="training.lora rank (0: full fine-tuning)")
    parser.add_argument("--sft-loss", type=float, default=None, help="stop the SFT warm start at this loss")
    parser.add_argument("--save-model", help="copy the SFT-warmed model here (reuse it with --model)")
    parser.add_argument("--speculative", action="store_true",
                        help="colocated, sync and async with generation.speculative off vs group "
                        "(bench/speculative.py --e2e)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="streamrl-bench-modes-") as tmp:
        data_dir = Path(tmp)
        redis_server, redis_url = configure(data_dir)
        procs: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        seaweed: Any = None
        try:
            from backend.controller.reconcile import CeleryTaskSender, reconcile_once
            from backend.db import Model, Team, User
            from backend.db.migrate import upgrade_database
            from backend.db.session import session_scope
            from contract.settings import get_settings
            from workers.datasets import generate_rows as generate_arithmetic
            from workers.datasets.long_tail import generate_rows
            from workers.models.tiny import build_tiny_model
            from workers.training.sft import SFTResult, sft_warm_start

            upgrade_database(get_settings().database_url)
            base = build_tiny_model(args.preset, data_dir / "base", seed=0)
            if args.learn:
                rows = generate_arithmetic("arithmetic", 4000, 1000, digits=1, ops="+")
                sft = sft_warm_start(base, data_dir / "artifacts" / "bench-model", rows, steps=300, lr=3e-3,
                                     batch_size=64, seed=0, target_loss=0.55, device=args.device)
            elif args.model:  # copied where the platform's artifacts live (the allowed model roots)
                copied = shutil.copytree(args.model, data_dir / "artifacts" / "bench-model")
                sft = SFTResult(Path(copied), 0, float("nan"), 0.0)
            else:
                rows = generate_rows(512, seed=1, split="train", **({"max_k": args.max_k} if args.max_k else {}))
                sft = sft_warm_start(base, data_dir / "artifacts" / "bench-model", rows, steps=100_000,
                                     time_budget_s=args.sft_seconds, seed=0, device=args.device,
                                     target_loss=args.sft_loss)
                print(f"SFT {sft.steps} steps, loss {sft.final_loss:.3f}", flush=True)
                if args.save_model:
                    shutil.copytree(sft.model_dir, args.save_model, dirs_exist_ok=True)
            with session_scope() as session:
                team = Team(name="bench", max_concurrent_jobs=1, max_generation_instances=16)
                user = User(email="bench@example.com")
                session.add_all([team, user])
                session.flush()
                session.add(Model(team_id=team.id, name="bench", path=str(sft.model_dir)))
                team_id, user_id = team.id, user.id
                dataset_id = learn_dataset(session, team.id, data_dir) if args.learn else None
                args.dataset_id = (long_tail_dataset(session, team.id, data_dir, args.max_k)
                                   if args.max_k and not args.learn else None)
            if args.object_store:  # every process (this one and the workers) reads STREAMRL_ARTIFACTS
                sys.path.insert(0, str(REPO / "tests"))
                from object_store import SeaweedS3

                seaweed = SeaweedS3(data_dir / "seaweed")
                seaweed.start()
                os.environ.update(seaweed.env("streamrl/bench-modes"))
            env = dict(os.environ, PYTHONPATH=child_pythonpath(REPO), STREAMRL_DEVICE=args.device)
            sender = CeleryTaskSender(redis_url)

            def control() -> None:
                while not stop.wait(0.5):
                    try:
                        reconcile_once(sender=sender)
                    except Exception as exc:
                        print(f"controller: {exc}", file=sys.stderr)

            threading.Thread(target=control, daemon=True).start()
            if args.learn:
                procs = start_workers(env, data_dir, {"generation": ";".join(str(c) for c in range(args.instances)),
                                                 "training": str(args.instances)})
                return _learn(args, team_id, user_id, dataset_id)
            n, cores = args.instances, args.cores
            gen_cores = args.gen_cores or max(n, cores // 2)
            print(f"{cores} cores: colocated on 0-{cores - 1}; sync/async with {n} instance(s) on {gen_cores} core(s) "
                  f"and the trainer on {cores - gen_cores}; {args.iterations} iterations x {args.repeats} repeats "
                  "(median run)", flush=True)
            if args.sync_shares_cores:
                print(f"sync: {n} instance(s) splitting all {cores} cores, the trainer on all of them", flush=True)
            runs = [("colocated", "colocated", "random", 1), ("sync", "sync", "random", n),
                    ("async", "async", "random", n), ("sync+skew", "sync", "skew_aware", n),
                    ("async+skew", "async", "skew_aware", n)]
            if args.configs:
                wanted = set(args.configs.split(","))
                unknown = wanted - {run[0] for run in runs}
                if unknown or "colocated" not in wanted:
                    parser.error(f"--configs: unknown {sorted(unknown)}" if unknown else "--configs needs colocated")
                runs = [run for run in runs if run[0] in wanted]
            if args.partial_rollouts:
                runs = [("async+drain", "async", "random", n), ("async+partial", "async", "random", n)]
            if args.speculative:
                runs = [(key, key.split("+")[0], "random", 1 if key.startswith("colocated") else n)
                        for key in SPECULATIVE]
            if args.skew_only:
                runs = [("sync", "sync", "random", n), ("sync+skew", "sync", "skew_aware", n)]
                print(f"skew only: sync with {n} instance(s) splitting all {cores} cores, the trainer on all of them",
                      flush=True)
            measured: dict[str, list[dict[str, float]]] = {}
            # --speculative alternates the arms' order every round (ABBA): drift in the machine's load falls evenly
            schedule = [(r, run) for r in range(args.repeats)
                        for run in (runs[::-1] if args.speculative and r % 2 else runs)]
            for _round, (key, mode, policy, instances) in schedule:
                shares = args.skew_only or (args.sync_shares_cores and mode == "sync")
                if args.device == "cuda":  # one GPU: each pool's processes on GPU 0
                    devices = gpu_layout(mode, instances)
                elif shares:
                    devices = shared_layout(cores, instances)
                else:
                    devices = layout(mode, cores, gen_cores, instances)
                procs = start_workers(env, data_dir, devices)
                procs_pools = list(devices)
                spies = profile_workers(procs, list(devices), Path(args.profile), key,
                                 args.profile_format) if args.profile and _round == 0 else []
                try:
                    spec = _spec(args, mode, policy, instances)
                    if key in PARTIAL:
                        spec["generation"]["partial_rollouts"] = PARTIAL[key]
                        spec["name"] = f"bench-{key}"
                    if key in SPECULATIVE:
                        spec["generation"]["speculative"] = SPECULATIVE[key]
                        spec["name"] = f"bench-{key}"
                    snapshots: dict[int, list[float]] = {}

                    def progress(done: int, procs: list[subprocess.Popen[bytes]] = procs,
                                 snapshots: dict[int, list[float]] = snapshots) -> None:
                        # CPU of the steady iterations: from iteration 1's record (start-up) to the last one's
                        if done >= 1 and 1 not in snapshots:
                            snapshots[1] = cpu_seconds(procs)
                        if done >= args.iterations and 2 not in snapshots:
                            snapshots[2] = cpu_seconds(procs)

                    rows = run_job(team_id, user_id, spec, args.timeout, progress)
                    if 2 not in snapshots:  # the job finished between two polls
                        snapshots[2] = cpu_seconds(procs)
                finally:
                    stop_profiles(spies)
                    stop_process_groups(procs)
                    procs = []
                measured.setdefault(key, []).append(summary(rows))
                steady = max(1, len(rows) - 1)
                cpu = {pool: (snapshots[2][i] - snapshots.get(1, [0.0] * len(procs_pools))[i]) / steady
                       for i, pool in enumerate(procs_pools)}
                measured[key][-1].update({f"cpu_{pool}": seconds for pool, seconds in cpu.items()})
                for i, row in enumerate(rows if args.verbose else []):
                    print(f"  {key} it{i + 1}: " + " ".join(f"{k}={row.get(k, 0.0):.2f}" for k in (
                        "iteration_seconds", "gen_seconds", "train_seconds", "trainer_idle_seconds",
                        "generator_idle_seconds", "weight_sync_seconds", "len_p50", "len_max")))
                r = measured[key][-1]
                print(f"{key:12s} samples/s={r['samples_per_s']:7.2f} iter={r['iteration_s']:6.2f}s = "
                      f"train {r['train']:.2f} + wait {r['wait']:.2f} + sync {r['sync']:.3f} + overhead "
                      f"{r['overhead']:.2f} (gen {r['gen']:.2f}) weight_sync={100 * r['sync_fraction']:5.2f}% "
                      f"tail={r['tail']:.2f} long_tail_instances={r['long_tail']:.2f} reward={r['reward']:.3f} "
                      f"len p50/p90 {r['len_p50']:.0f}/{r['len_p90']:.0f} cpu/iteration "
                      + " ".join(f"{k[4:]} {v:.2f} s" for k, v in r.items() if k.startswith("cpu_")), flush=True)
            results = {key: median_run(runs_of) for key, runs_of in measured.items()}
        finally:
            stop.set()
            stop_process_groups(procs)
            redis_server.stop()
            if seaweed is not None:
                seaweed.stop()

    if args.partial_rollouts:
        return partial_result(results, measured)
    if args.speculative:
        return speculative_result(results, measured)
    if args.skew_only:
        rand, skew = results["sync"], results["sync+skew"]
        for key, r in results.items():
            print(f"  {key:11s} {r['samples_per_s']:7.2f} samples/s; iteration {r['iteration_s']:6.2f} = "
                  f"{r['train']:.2f} + {r['wait']:.2f} + {r['sync']:.3f} + {r['overhead']:.2f} | generation "
                  f"{r['gen']:.2f}")
        print(f"RESULT skew_only preset={args.preset} sync_random={rand['samples_per_s']:.2f} "
              f"sync_skew_aware={skew['samples_per_s']:.2f} "
              f"skew_over_random={skew['samples_per_s'] / rand['samples_per_s']:.3f} "
              f"generation_skew_over_random={skew['gen'] / rand['gen']:.3f}")
        return
    col = results["colocated"]["samples_per_s"]
    print(f"\n{'mode':10s} {'samples/s':>10s} {'x colocated':>12s} {'weight sync %':>14s} {'skew_aware':>11s} "
          f"{'skew gain':>10s}")
    for mode in ("colocated", "sync", "async"):
        if mode not in results:
            continue
        rand, skewed = results[mode], results.get(f"{mode}+skew")
        extra = f"{'-':>11s} {'-':>10s}"
        if skewed:
            gain = skewed["samples_per_s"] / rand["samples_per_s"]
            extra = f"{skewed['samples_per_s']:11.2f} {gain:10.2f}"
        print(f"{mode:10s} {results[mode]['samples_per_s']:10.2f} {results[mode]['samples_per_s'] / col:12.2f} "
              f"{100 * results[mode]['sync_fraction']:14.2f} {extra}")
    print("\nper-iteration seconds (median run): mode: iteration = train + wait + sync + overhead | generation")
    for key, r in results.items():
        print(f"  {key:11s} {r['iteration_s']:6.2f} = {r['train']:.2f} + {r['wait']:.2f} + {r['sync']:.3f} + "
              f"{r['overhead']:.2f} | {r['gen']:.2f}")
    figures = [f"colocated={col:.2f}"] + (["artifacts=s3"] if args.object_store else [])
    for key, name in (("sync", "sync"), ("async", "async"), ("sync+skew", "skew_aware_sync"),
                      ("async+skew", "skew_aware_async")):
        if key in results:
            figures.append(f"{name}={results[key]['samples_per_s']:.2f}")
            if "+" not in key:
                figures.append(f"{key}_over_colocated={results[key]['samples_per_s'] / col:.2f}")
    if "async" in results:
        figures.append(f"weight_sync_fraction_async={results['async']['sync_fraction']:.4f}")
        col_r, split = results["colocated"], results["async"]
        bound, gen_scaling, train_scaling = disaggregation_bound(col_r, split)
        print(f"\nbound: colocated {col_r['iteration_s']:.2f} s/iteration = generation {col_r['gen']:.2f} + "
              f"training {col_r['train']:.2f} + rest on {args.cores} cores; async's own core sets: "
              f"generation {split['gen']:.2f} s, training {split['train']:.2f} s (the extra cores speed "
              f"colocated's generation {gen_scaling:.2f}x, its training {train_scaling:.2f}x); async can at most "
              f"reach {col_r['iteration_s']:.2f} / {max(split['gen'], split['train']):.2f} = {bound:.2f}x colocated; "
              f"measured {split['samples_per_s'] / col:.2f}x ({100 * split['samples_per_s'] / col / bound:.0f}% of "
              "the bound)")
        figures += [f"async_bound_over_colocated={bound:.2f}", f"gen_scaling={gen_scaling:.2f}",
                    f"train_scaling={train_scaling:.2f}"]
    print("RESULT " + " ".join(figures))


if __name__ == "__main__":
    main()
