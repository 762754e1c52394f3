"""The Tinker-compatible API (docs/tinker.md) against the platform's own jobs, on a platform this script starts.

(a) A GRPO loop written only against the unchanged `tinker` SDK (per step: save_weights_and_get_sampling_client,
    sample `--prompts` arithmetic prompts x `--group` samples of up to `--max-tokens` tokens, reward = the answer
    contains a digit, group-centred advantages, forward_backward "importance_sampling", optim_step) vs the same work
    submitted as a platform GRPO job (mode sync, one generation instance, LoRA rank 8, the regex reward `[0-9]`):
    samples/s from the request that creates the training client (the job's submit) to the last step's end, so both
    pay admission and model loading. Rounds interleave SDK and job runs; figures are medians over rounds.
(b) Server overhead of forward_backward and optim_step on a trivial batch (one datum of 4 tokens): the wall time of
    the SDK call (`.result()`) minus the compute time the session measured for it (each stored result's `timing`,
    read from Redis), p50 per round, median over rounds. Target: < 30 ms.
(c) Parking (docs/tinker.md#parking): a training client left idle for STREAMRL_TINKER_IDLE_S (set to IDLE_S here) is
    parked; the wall time of its next forward_backward (the restore: admission, the task's start, loading the model
    and the park state, then the call) against the same call on the warm session just before, and the session's own
    `restore_s` (its `resumed` event).
(d) Top-k logprobs (distillation's teacher scoring): on the SDK run's last sampler (its instance warm), the same
    seeded sample call with `topk_prompt_logprobs` = `topk_sample_logprobs` = TOPK against it without, interleaved
    `--calls // 3` times: median wall time of each and their ratio.

Starts its own platform in a temporary directory: embedded Redis, SQLite, the API (uvicorn, one process), one
generation and one training worker (`streamrl worker`, pinned to core 0 and core 1; one slot each) and the controller
loop (a thread). Idle inference instances stop after 5 s (STREAMRL_INFERENCE_IDLE_S), so the SDK run's last sampler
does not hold the one generation slot into the job's run.

Run: `python bench/tinker_api.py [--rounds 3] [--steps 4] [--prompts 4] [--group 8] [--max-tokens 16] [--calls 30]`.
Final line: `RESULT sdk_samples_s=... job_samples_s=... sdk_vs_job=... fb_overhead_ms=... optim_overhead_ms=...
restore_wall_s=... restore_event_s=... warm_call_ms=... restore_vs_warm=... topk_call_ms=... plain_call_ms=...
topk_vs_plain=...`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from processes import child_pythonpath, stop_process_groups  # noqa: E402  (bench/, the script's directory)

SECRET = "bench-tinker-secret-key-0123456789abcdef"
IDLE_S = 20  # STREAMRL_TINKER_IDLE_S: longer than any gap of the SDK run between its calls (a step's sampling)
TOPK = 8


@contextmanager
def _platform_dir(keep: bool) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="streamrl-bench-tinker-")
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(env: dict[str, str], data_dir: Path) -> tuple[list[subprocess.Popen[bytes]], str]:
    port = _free_port()
    procs = []
    for name, argv in (("api", ["-m", "uvicorn", "backend.main:create_app", "--factory", "--port", str(port),
                                "--log-level", "warning", "--no-access-log"]),
                       ("generation", ["-m", "streamrl.cli.main", "worker", "--pool", "generation", "--devices", "0"]),
                       ("training", ["-m", "streamrl.cli.main", "worker", "--pool", "training", "--devices", "1"])):
        log = open(data_dir / f"{name}.log", "ab")  # noqa: SIM115
        procs.append(subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/tinker/api/v1/healthz", timeout=2).status_code == 200:
                return procs, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the API did not start; see {data_dir / 'api.log'}")


def _prompts(tokenizer: Any, n: int, seed: int) -> list[list[int]]:
    from workers.datasets import generate_rows

    rows = generate_rows("arithmetic", n, seed=seed)
    return [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}],
                                                           add_generation_prompt=True, tokenize=False))
            for row in rows]


def topk_round(sampler: Any, prompt: list[int], args: argparse.Namespace, calls: int) -> tuple[float, float]:
    """Median ms of a seeded sample call with top-k prompt and sample logprobs, and of the same call without."""
    from tinker import types

    params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=7)
    with_topk, plain = [], []
    for _ in range(max(1, calls)):
        for target, k in ((with_topk, TOPK), (plain, 0)):
            started = time.perf_counter()
            out = sampler.sample(types.ModelInput.from_ints(prompt), args.group, params, include_prompt_logprobs=True,
                                 topk_prompt_logprobs=k, topk_sample_logprobs=k).result(timeout=600)
            target.append(1000 * (time.perf_counter() - started))
            if k:
                assert out.topk_prompt_logprobs is not None and out.sequences[0].topk_logprobs is not None
    return statistics.median(with_topk), statistics.median(plain)


def sdk_run(service: Any, args: argparse.Namespace, seed: int) -> tuple[float, tuple[float, float]]:
    """The SDK GRPO loop; samples/s from creating the training client to the last optim_step, then (d) on its last
    sampler."""
    from tinker import types

    started = time.perf_counter()
    trainer = service.create_lora_training_client(base_model="chat", rank=8, seed=0).result(timeout=600)
    tokenizer = trainer.get_tokenizer()
    prompts = _prompts(tokenizer, args.prompts * args.steps, seed)
    for step in range(args.steps):
        sampler = trainer.save_weights_and_get_sampling_client().result(timeout=120)
        batch = prompts[step * args.prompts:(step + 1) * args.prompts]
        params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=seed * 1000 + step)
        futures = [sampler.sample(types.ModelInput.from_ints(p), args.group, params) for p in batch]
        data = []
        for prompt, future in zip(batch, futures, strict=True):
            group = future.result(timeout=600).sequences
            scores = [float(any(c.isdigit() for c in tokenizer.decode(s.tokens))) for s in group]
            mean, pad = sum(scores) / len(scores), [0.0] * (len(prompt) - 1)
            data += [types.Datum(model_input=types.ModelInput.from_ints(prompt + s.tokens[:-1]),
                                 loss_fn_inputs={"target_tokens": prompt[1:] + s.tokens,
                                                 "logprobs": pad + list(s.logprobs),
                                                 "advantages": pad + [score - mean] * len(s.tokens)})
                     for s, score in zip(group, scores, strict=True)]
        trainer.forward_backward(data, "importance_sampling").result(timeout=600)
        trainer.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=600)
    rate = args.steps * args.prompts * args.group / (time.perf_counter() - started)
    return rate, topk_round(sampler, prompts[0], args, args.calls // 3)


def job_run(team_id: int, user_id: int, args: argparse.Namespace, seed: int) -> float:
    """The same work as a platform job; samples/s from submit to succeeded."""
    from backend.db import Job, JobStatus, Team, User
    from backend.db.session import session_scope
    from backend.services.jobs import create_job
    from contract.spec import JobSpec

    spec = JobSpec.model_validate({
        "name": f"bench-tinker-job-{seed}", "model": "chat", "mode": "sync", "seed": seed,
        "dataset": {"builtin": "arithmetic", "num_prompts": args.prompts * args.steps, "eval_prompts": 0},
        "reward": {"type": "regex", "params": {"pattern": "[0-9]"}}, "algorithm": {"name": "grpo",
                                                                               "group_size": args.group},
        "generation": {"instances": 1, "max_tokens": args.max_tokens, "temperature": 1.0},
        "training": {"iterations": args.steps, "prompts_per_iteration": args.prompts, "lr": 1e-3,
                     "lora": {"rank": 8, "alpha": 32.0}},
        "checkpoint": {"interval": 1_000_000}})
    started = time.perf_counter()
    with session_scope() as session:
        job_id = create_job(session=session, team=session.get(Team, team_id), user=session.get(User, user_id),
                            spec=spec).id
    while True:
        with session_scope() as session:
            job = session.get(Job, job_id)
            assert job is not None
            if job.status == JobStatus.succeeded:
                return args.steps * args.prompts * args.group / (time.perf_counter() - started)
            if job.status in (JobStatus.failed, JobStatus.cancelled):
                raise SystemExit(f"the platform job {job.status}: {job.error}")
        time.sleep(0.2)


def overhead_round(service: Any, client: Any, calls: int) -> tuple[float, float]:
    """p50 ms of (SDK wall - session compute) for forward_backward and optim_step on a trivial batch."""
    from sqlalchemy import select
    from tinker import types

    from backend.db import Job
    from backend.db.session import session_scope

    trainer = service.create_lora_training_client(base_model="chat", rank=8, seed=0).result(timeout=600)
    batch = [types.Datum(model_input=types.ModelInput.from_ints([5, 9, 12, 7]),
                         loss_fn_inputs={"target_tokens": [9, 12, 7, 3], "weights": [1.0] * 4})]
    walls: list[tuple[float, float]] = []
    for _ in range(3 + calls):  # 3 warm-up calls
        t0 = time.perf_counter()
        trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
        t1 = time.perf_counter()
        trainer.optim_step(types.AdamParams(learning_rate=1e-4)).result(timeout=60)
        walls.append((t1 - t0, time.perf_counter() - t1))
    with session_scope() as session:
        job_id = session.scalar(select(Job.id).where(Job.name == trainer.model_id))
    timings = []
    for key in client.scan_iter(match=f"streamrl:tinker:result:{job_id}.*", count=1000):
        timing = json.loads(client.get(key)).get("timing")
        if timing is not None:
            timings.append(timing)
    timings.sort(key=lambda t: t["seq"])
    fwd = [t["compute_s"] for t in timings if t["kind"] == "forward_backward"][-calls:]
    opt = [t["compute_s"] for t in timings if t["kind"] == "optim_step"][-calls:]
    measured = walls[-calls:]
    return (1000 * statistics.median(w[0] - c for w, c in zip(measured, fwd, strict=True)),
            1000 * statistics.median(w[1] - c for w, c in zip(measured, opt, strict=True)))


def restore_round(service: Any) -> tuple[float, float, float]:
    """(seconds of the first call after a park, the session's restore_s event, ms of the same call warm)."""
    from sqlalchemy import select
    from tinker import types

    from backend.db import Job, JobEvent, JobStatus
    from backend.db.session import session_scope

    trainer = service.create_lora_training_client(base_model="chat", rank=8, seed=0).result(timeout=600)
    batch = [types.Datum(model_input=types.ModelInput.from_ints([5, 9, 12, 7]),
                         loss_fn_inputs={"target_tokens": [9, 12, 7, 3], "weights": [1.0] * 4})]
    for _ in range(3):
        t0 = time.perf_counter()
        trainer.forward_backward(batch, "cross_entropy").result(timeout=60)
    warm = time.perf_counter() - t0

    def job() -> Job:
        with session_scope() as session:
            found = session.scalar(select(Job).where(Job.name == trainer.model_id))
            assert found is not None
            return found

    deadline = time.monotonic() + IDLE_S + 120
    while job().status != JobStatus.parked:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{trainer.model_id} did not park")
        time.sleep(0.5)
    t0 = time.perf_counter()
    trainer.forward_backward(batch, "cross_entropy").result(timeout=600)
    wall = time.perf_counter() - t0
    with session_scope() as session:
        data = session.scalars(select(JobEvent.data).where(JobEvent.job_id == job().id, JobEvent.kind == "tinker")
                               .order_by(JobEvent.id.desc())).all()
    event = next(float(d["restore_s"]) for d in data if d and d.get("tinker") == "resumed")
    return wall, event, 1000 * warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the platform's directory (worker and API logs)")
    args = parser.parse_args()

    with _platform_dir(args.keep) as tmp:
        data_dir = Path(tmp)
        print(f"platform directory: {data_dir}", flush=True)
        from backend.embedded_redis import start_embedded_redis

        redis_server = start_embedded_redis(data_dir)
        os.environ.update({"STREAMRL_DATA_DIR": str(data_dir), "STREAMRL_REDIS_URL": redis_server.url,
                           "STREAMRL_SECRET_KEY": SECRET, "STREAMRL_AUTO_MIGRATE": "false", "OMP_NUM_THREADS": "1",
                           "TOKENIZERS_PARALLELISM": "false", "STREAMRL_DEVICE": "cpu",
                           "STREAMRL_INFERENCE_IDLE_S": "5",  # a run's last sampler frees the slot for the next
                           "STREAMRL_TINKER_IDLE_S": str(IDLE_S)})
        procs: list[subprocess.Popen[bytes]] = []
        stop = threading.Event()
        try:
            import redis
            import tinker

            from backend.controller.reconcile import CeleryTaskSender, reconcile_once
            from backend.db import Membership, Model, Team, User
            from backend.db.migrate import upgrade_database
            from backend.db.session import session_scope
            from backend.services.auth import new_api_key
            from contract.settings import get_settings
            from workers.models import build_tiny_model

            upgrade_database(get_settings().database_url)
            model_dir = build_tiny_model("chat-qwen2-1m", data_dir / "artifacts" / "models" / "chat", seed=0)
            with session_scope() as session:
                team = Team(name="bench", max_concurrent_jobs=2, max_generation_instances=4)
                user = User(email="bench@example.com")
                session.add_all([team, user])
                session.flush()
                session.add(Membership(team_id=team.id, user_id=user.id, role="owner"))
                session.add(Model(team_id=team.id, name="chat", path=str(model_dir), created_by_id=user.id))
                session.flush()
                key = new_api_key(session=session, team=team, creator=user, name="bench", scopes=["read", "write"])[1]
                team_id, user_id = team.id, user.id
            procs, base = _start(dict(os.environ, PYTHONPATH=child_pythonpath(REPO)), data_dir)
            sender = CeleryTaskSender(redis_server.url)

            def control() -> None:
                while not stop.wait(0.2):
                    try:
                        reconcile_once(sender=sender)
                    except Exception as exc:
                        print(f"controller: {exc}", file=sys.stderr)

            threading.Thread(target=control, daemon=True).start()
            client = redis.Redis.from_url(redis_server.url)
            sdk, job, fwd, opt, restores, topk = [], [], [], [], [], []
            for round_ in range(args.rounds):
                service = tinker.ServiceClient(base_url=f"{base}/tinker", api_key=key)
                rate, topk_ms = sdk_run(service, args, seed=round_)
                sdk.append(rate)
                topk.append(topk_ms)
                service.close("success").result()
                job.append(job_run(team_id, user_id, args, seed=round_))
                service = tinker.ServiceClient(base_url=f"{base}/tinker", api_key=key)
                fb_ms, opt_ms = overhead_round(service, client, args.calls)
                service.close("success").result()
                fwd.append(fb_ms)
                opt.append(opt_ms)
                service = tinker.ServiceClient(base_url=f"{base}/tinker", api_key=key)
                restores.append(restore_round(service))
                service.close("success").result()
                print(f"round {round_ + 1}: sdk {sdk[-1]:.2f} samples/s, job {job[-1]:.2f} samples/s, overhead "
                      f"forward_backward {fb_ms:.1f} ms, optim_step {opt_ms:.1f} ms (p50); restore "
                      f"{restores[-1][0]:.2f} s (event {restores[-1][1]:.2f} s, warm call {restores[-1][2]:.1f} ms); "
                      f"top-{TOPK} sample call {topk[-1][0]:.1f} ms vs {topk[-1][1]:.1f} ms without",
                      flush=True)
        finally:
            stop.set()
            stop_process_groups(procs)
            redis_server.stop()
    s, j = statistics.median(sdk), statistics.median(job)
    wall, event, warm = (statistics.median(r[i] for r in restores) for i in range(3))
    topk_ms, plain_ms = (statistics.median(t[i] for t in topk) for i in range(2))
    print(f"RESULT sdk_samples_s={s:.2f} job_samples_s={j:.2f} sdk_vs_job={s / j:.2f} "
          f"fb_overhead_ms={statistics.median(fwd):.1f} optim_overhead_ms={statistics.median(opt):.1f} "
          f"target_overhead_ms=30 restore_wall_s={wall:.2f} restore_event_s={event:.2f} warm_call_ms={warm:.1f} "
          f"restore_vs_warm={1000 * wall / warm:.0f} topk_call_ms={topk_ms:.1f} plain_call_ms={plain_ms:.1f} "
          f"topk_vs_plain={topk_ms / plain_ms:.2f} topk={TOPK} rounds={args.rounds}")


if __name__ == "__main__":
    main()
