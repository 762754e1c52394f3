"""What evaluation suites cost training: the same sync job with a suite every 5 iterations against none.

    python bench/eval_overhead.py [--iterations 20 --every 5 --repeats 2 --eval-prompts 16 --device cpu]

Runs the real platform, self-contained (SQLite + an embedded Redis in a temp dir, `streamrl worker` processes, the
controller's reconcile loop). The generation pool has two slots (device sets): the job's instance takes one, the
evaluation runner (`generation.run_evaluation`, a task of its own) the other; the trainer has its own. An untimed
warm-up job first, then each round runs both configurations back to back (interleaved); each reports its median
round. Training throughput is samples /
seconds of iterations 2..N (iteration 1 carries engine start-up), the figure the issue's bar (>= 0.9x) is about; the
job's wall time also counts the wait for the last checkpoint's evaluation after training.
Ends with `RESULT eval_overhead samples_per_s_ratio=... none=... with_suite=... wall_ratio=... evaluations=...`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from modes_platform import configure, start_workers, submit_job  # noqa: E402  (bench/, the script's directory)
from processes import child_pythonpath, stop_process_groups  # noqa: E402


def spec(args: argparse.Namespace, with_suite: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"eval-overhead-{'suite' if with_suite else 'none'}", "model": "bench", "mode": "sync", "seed": 0,
        "dataset": {"builtin": "arithmetic", "num_prompts": 256, "eval_prompts": 0},
        "reward": {"type": "exact_match"}, "algorithm": {"name": "grpo", "group_size": args.group},
        "generation": {"instances": 1, "batch_size": 64, "max_tokens": args.max_tokens},
        "training": {"iterations": args.iterations, "prompts_per_iteration": args.prompts, "micro_batch_size": 16,
                     "lr": 1e-4, "eval_every": 0},
        "checkpoint": {"interval": args.every, "keep": 2},
    }
    if with_suite:
        body["evaluation"] = [{"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": args.eval_prompts},
                               "samples_per_prompt": 2, "sampling": {"temperature": 1.0,
                                                                     "max_tokens": args.max_tokens}}]
        body["evaluation_every"] = args.every
        body["checkpoint"] = {"interval": args.every, "keep": 2, "select": "best", "metric": "held/mean"}
    return body


def run_job(team_id: int, user_id: int, body: dict[str, Any], timeout_s: float) -> dict[str, float]:
    from sqlalchemy import func, select

    from backend.db import Iteration, Job, JobStatus
    from backend.db.models import Evaluation
    from backend.db.session import session_scope

    job_id = submit_job(team_id, user_id, body)
    started, deadline = time.time(), time.time() + timeout_s
    while time.time() < deadline:
        with session_scope() as session:
            job = session.get(Job, job_id)
            assert job is not None
            if job.status in (JobStatus.failed, JobStatus.cancelled):
                raise RuntimeError(f"{body['name']}: job {job.status}: {job.error}")
            if job.status == JobStatus.succeeded:
                rows = [dict(m) for m in session.scalars(select(Iteration.metrics).where(
                    Iteration.job_id == job_id).order_by(Iteration.iteration))]
                done = session.scalar(select(func.count()).where(Evaluation.job_id == job_id,
                                                                  Evaluation.status == "succeeded")) or 0
                steady = rows[1:]
                seconds = sum(r["iteration_seconds"] for r in steady)
                return {"samples_per_s": sum(r["samples"] for r in steady) / seconds,
                        "wall_s": time.time() - started, "evaluations": float(done)}
        time.sleep(0.5)
    raise RuntimeError(f"{body['name']}: not done after {timeout_s}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--every", type=int, default=5, help="evaluation_every (and the checkpoint interval)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--eval-prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="streamrl-bench-eval-") as tmp:
        data_dir = Path(tmp)
        redis_server, redis_url = configure(data_dir)
        procs: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        try:
            from backend.controller.reconcile import CeleryTaskSender, reconcile_once
            from backend.db import Model, Team, User
            from backend.db.migrate import upgrade_database
            from backend.db.session import session_scope
            from contract.settings import get_settings
            from workers.models.tiny import build_tiny_model

            upgrade_database(get_settings().database_url)
            model = build_tiny_model("tiny-1m", data_dir / "artifacts" / "bench-model", seed=0)
            with session_scope() as session:
                team = Team(name="bench", max_concurrent_jobs=1, max_generation_instances=4)
                user = User(email="bench@example.com")
                session.add_all([team, user])
                session.flush()
                session.add(Model(team_id=team.id, name="bench", path=str(model)))
                team_id, user_id = team.id, user.id
            env = dict(os.environ, PYTHONPATH=child_pythonpath(REPO), STREAMRL_DEVICE=args.device)
            cores = os.cpu_count() or 2
            devices = ({"generation": "0;0", "training": "0"} if args.device == "cuda" else
                       {"generation": f"0;{cores - 1}", "training": f"{min(1, cores - 1)}-{cores - 1}"})
            procs = start_workers(env, data_dir, devices)
            sender = CeleryTaskSender(redis_url)

            def control() -> None:
                while not stop.wait(0.5):
                    try:
                        reconcile_once(sender=sender)
                    except Exception as exc:
                        print(f"controller: {exc}", file=sys.stderr)

            threading.Thread(target=control, daemon=True).start()
            warm = {**spec(args, True), "name": "eval-overhead-warmup"}  # worker processes load torch & the model
            warm["training"] = {**warm["training"], "iterations": args.every}
            run_job(team_id, user_id, warm, args.timeout)
            measured: dict[bool, list[dict[str, float]]] = {False: [], True: []}
            for round_, with_suite in itertools.product(range(args.repeats), (False, True)):
                result = run_job(team_id, user_id, spec(args, with_suite), args.timeout)
                measured[with_suite].append(result)
                print(f"round {round_} {'suite' if with_suite else 'none '}: {result['samples_per_s']:.2f} samples/s, "
                      f"wall {result['wall_s']:.1f}s, evaluations {result['evaluations']:.0f}", flush=True)
            none = statistics.median(r["samples_per_s"] for r in measured[False])
            suite = statistics.median(r["samples_per_s"] for r in measured[True])
            wall = statistics.median(r["wall_s"] for r in measured[True]) / statistics.median(
                r["wall_s"] for r in measured[False])
            print(f"RESULT eval_overhead samples_per_s_ratio={suite / none:.3f} none={none:.2f} with_suite={suite:.2f} "
                  f"wall_ratio={wall:.3f} evaluations={measured[True][-1]['evaluations']:.0f}")
        finally:
            stop.set()
            stop_process_groups(procs)
            redis_server.stop()


if __name__ == "__main__":
    main()
