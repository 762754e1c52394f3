"""The hf engine's tokens/s inside a generation instance (the job's loop) vs the same engine alone.

    python bench/instance.py [--requests 256] [--batch 64] [--max-tokens 64] [--repeats 3] [--redis-url URL]

Workload: `--requests` long_tail prompts (group size 8), the job's sampling (temperature 1, seeded per request, so
both sides generate exactly the same tokens). "engine": `generate_stream` over the requests, nothing else. "instance":
the requests are written to an instance's prompt stream in Redis first, then `InstanceRunner` (workers/runtime/
instance.py: Redis feed, weight-version checks, reward, sample stream, acks, heartbeat) serves them; its time runs
from the engine's start to the last sample in the stream. Both run in this process, interleaved, `--repeats` times;
figures are medians (the machine is shared). Prints
    RESULT instance_tok_s=X engine_tok_s=Y instance_over_engine=R
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis
import torch
from transformers.utils import logging as hf_logging

from contract import keys
from contract.reporter import JobRecord, MemoryReporter
from contract.spec import JobSpec
from contract.states import InstanceStatus, JobStatus
from workers.core import generation_request, make_requests, sampling_params
from workers.datasets import generate_rows
from workers.models import build_tiny_model
from workers.runtime import components
from workers.runtime.context import JobContext
from workers.runtime.instance import InstanceRunner
from workers.stream import PromptQueue
from workers.stream.redis_streams import clear_job


class _TimedReporter(MemoryReporter):
    """Notes when the instance's engine started serving (its status goes to running)."""

    running_at: float = 0.0

    def set_instance_status(self, job_id: int, instance_id: str, status: InstanceStatus,
                            error: str | None = None) -> None:
        if status == InstanceStatus.running:
            self.running_at = time.perf_counter()
        super().set_instance_status(job_id, instance_id, status, error)


def make_spec(model_dir: Path, args: argparse.Namespace) -> JobSpec:
    return JobSpec.model_validate({
        "model": str(model_dir), "dataset": {"builtin": "long_tail"}, "reward": {"type": "exact_match"},
        "algorithm": {"group_size": 8}, "mode": "sync",
        "generation": {"batch_size": args.batch, "max_tokens": args.max_tokens, "temperature": 1.0},
        "seed": 0,
    })


def run_engine(spec: JobSpec, model_dir: Path, requests: list[Any]) -> tuple[int, float]:
    engine = components.make_engine(spec, model_dir, device="cpu")
    sampling = sampling_params(spec.generation)
    started = time.perf_counter()
    tokens = sum(len(r.response_ids) for r in engine.generate_stream(generation_request(q, sampling)
                                                                     for q in requests))
    return tokens, time.perf_counter() - started


def run_instance(spec: JobSpec, model_dir: Path, requests: list[Any], client: redis.Redis, work: Path) -> tuple[int,
                                                                                                               float]:
    job_id = random.randrange(10**9, 2 * 10**9)  # keys are prefixed by the job id: no clash on a shared Redis
    reporter = _TimedReporter()
    reporter.add_job(JobRecord(job_id, 0, spec, JobStatus.running, str(model_dir), None))
    reporter.instances[job_id] = {"gen-0": InstanceStatus.starting}
    ctx = JobContext(job_id=job_id, team_id=0, spec=spec, model_dir=model_dir, job_dir=work / str(job_id),
                     reporter=reporter, redis=client)
    try:
        client.set(keys.ptl_lock(job_id), 1, ex=600)  # no PTL profile: it is not generation
        PromptQueue(client, job_id, "gen-0").put(requests)
        runner = InstanceRunner(ctx, "gen-0")
        done, emit, finished = threading.Event(), runner._emit, [0.0]

        def timed_emit(result: Any) -> None:  # the last sample's time, without a polling thread taking the GIL
            emit(result)
            if runner.produced == len(requests):
                finished[0] = time.perf_counter()
                done.set()

        runner._emit = timed_emit  # type: ignore[method-assign]
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        while not done.wait(1.0):
            if not thread.is_alive():
                raise RuntimeError("the instance stopped early")
        runner.stop.set()
        thread.join(60)
        tokens = sum(len(s.response_ids) for _, s in runner.samples.read("bench", len(requests) + 10))
        return tokens, finished[0] - reporter.running_at
    finally:
        clear_job(client, job_id)


class CountingRedis(redis.Redis):
    """A client that counts its round trips: one per command, one per pipeline (however many commands it holds)."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        CountingRedis.round_trips += 1
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            CountingRedis.round_trips += 1
            return execute(raise_on_error)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--preset", default="tiny-1m")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    client = CountingRedis.from_url(args.redis_url)
    with tempfile.TemporaryDirectory(prefix="streamrl-instance-") as tmp:
        work = Path(tmp)
        model_dir = build_tiny_model(args.preset, work / "model", seed=0)
        spec = make_spec(model_dir, args)
        engine: Any = components.make_engine(spec, model_dir, device="cpu")  # the hf engine: has `encode`
        rows = generate_rows("long_tail", args.requests // 8, seed=0)
        groups = make_requests(rows, 0, group_size=8, encode=engine.encode, job_seed=0, min_version=0)
        requests = [r for group in groups for r in group]
        run_engine(spec, model_dir, requests[:16])  # warm-up
        rates: dict[str, list[float]] = {"engine": [], "instance": []}
        calls: list[float] = []
        for repeat in range(args.repeats):
            e_tokens, e_s = run_engine(spec, model_dir, requests)
            before = CountingRedis.round_trips
            i_tokens, i_s = run_instance(spec, model_dir, requests, client, work)
            calls.append((CountingRedis.round_trips - before) / len(requests))
            assert e_tokens == i_tokens, (e_tokens, i_tokens)  # same seeds, same tokens
            rates["engine"].append(e_tokens / e_s)
            rates["instance"].append(i_tokens / i_s)
            print(f"repeat {repeat}: {e_tokens} tokens; engine {e_s:.2f}s, instance {i_s:.2f}s", flush=True)
    engine_rate, instance_rate = statistics.median(rates["engine"]), statistics.median(rates["instance"])
    print(f"RESULT instance_tok_s={instance_rate:.0f} engine_tok_s={engine_rate:.0f} "
          f"instance_over_engine={instance_rate / engine_rate:.2f} requests={len(requests)} batch={args.batch} "
          f"max_tokens={args.max_tokens} repeats={args.repeats} preset={args.preset} "
          f"redis_round_trips_per_sample={statistics.median(calls):.2f}")


if __name__ == "__main__":
    main()
