"""The platform pieces bench/modes.py (and bench/eval_overhead.py) run a configuration on: the embedded Redis and
environment, pinned `streamrl worker` processes, their py-spy profiles and CPU seconds, a job run to success, and the
uploaded datasets of the learning and long-tail shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def configure(data_dir: Path) -> tuple[Any, str]:
    from backend.embedded_redis import start_embedded_redis

    redis_server = start_embedded_redis(data_dir)
    os.environ.update({"STREAMRL_DATA_DIR": str(data_dir), "STREAMRL_REDIS_URL": redis_server.url,
                       "STREAMRL_AUTO_MIGRATE": "false", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    return redis_server, redis_server.url


def start_workers(env: dict[str, str], log_dir: Path, devices: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    """`streamrl worker --pool P --devices SETS` per pool: one pinned process per device set."""
    procs = []
    for pool, sets in devices.items():
        log = open(log_dir / f"worker-{pool}.log", "ab")  # noqa: SIM115
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", pool, "--devices", sets],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    return procs


def profile_workers(procs: list[subprocess.Popen[bytes]], pools: list[str], out: Path,
             key: str, form: str = "flamegraph") -> list[subprocess.Popen[bytes]]:
    """py-spy (PyPI) profiles of every worker and its task processes while the job runs: `out/<key>-<pool>.svg`, or
    with form "raw" collapsed stacks (`<key>-<pool>.txt`: one "frame;frame;... count" line per stack, for grep)
    (stopped with SIGINT before the workers, so it writes the file)."""
    out.mkdir(parents=True, exist_ok=True)
    spies = []
    for proc, pool in zip(procs, pools, strict=True):
        target = out / f"{key.replace('+', '-')}-{pool}.{'txt' if form == 'raw' else 'svg'}"
        spies.append(subprocess.Popen(["py-spy", "record", "--subprocesses", "--nonblocking", "--rate", "50",
                                       "--format", form, "--pid", str(proc.pid), "--output", str(target)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return spies


def stop_profiles(spies: list[subprocess.Popen[bytes]]) -> None:
    for spy in spies:
        spy.send_signal(2)
    for spy in spies:
        try:
            spy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spy.kill()


def cpu_seconds(procs: list[subprocess.Popen[bytes]]) -> list[float]:
    """CPU seconds (user + system) each worker's process tree has used so far, reaped task processes included."""
    import psutil

    totals = []
    for proc in procs:
        total = 0.0
        try:
            root = psutil.Process(proc.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                pass
        totals.append(total)
    return totals


def submit_job(team_id: int, user_id: int, spec: dict[str, Any]) -> int:
    """Create the job as the team's user (the API's create path, without HTTP); its id."""
    from backend.db import Team, User
    from backend.db.session import session_scope
    from backend.services.jobs import create_job
    from contract.spec import JobSpec

    with session_scope() as session:
        team, user = session.get(Team, team_id), session.get(User, user_id)
        assert team is not None and user is not None
        return create_job(session=session, team=team, user=user, spec=JobSpec.model_validate(spec)).id


def run_job(team_id: int, user_id: int, spec: dict[str, Any], timeout_s: float,
             on_progress: Any = None) -> list[dict[str, Any]]:
    """Run a job to success; `on_progress(iterations_done)` at every poll."""
    from sqlalchemy import func, select

    from backend.db import Iteration, Job, JobStatus
    from backend.db.session import session_scope

    job_id = submit_job(team_id, user_id, spec)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with session_scope() as session:
            job = session.get(Job, job_id)
            assert job is not None
            if job.status in (JobStatus.failed, JobStatus.cancelled):
                raise RuntimeError(f"{spec['name']}: job {job.status}: {job.error}")
            if job.status == JobStatus.succeeded:
                return [dict(m) for m in session.scalars(select(Iteration.metrics).where(
                    Iteration.job_id == job_id).order_by(Iteration.iteration))]
            if on_progress is not None:
                on_progress(int(session.scalar(select(func.count()).select_from(Iteration).where(
                    Iteration.job_id == job_id)) or 0))
        time.sleep(0.5)
    raise RuntimeError(f"{spec['name']}: not done after {timeout_s}s")


def learn_dataset(session: Any, team_id: int, data_dir: Path) -> int:
    """One-digit addition prompts as an uploaded dataset (the built-in spec has no `digits` knob)."""
    from backend.db import Dataset
    from workers.datasets import generate_rows, write_jsonl

    path = data_dir / "one_digit_addition.jsonl"
    count = write_jsonl(generate_rows("arithmetic", 2048, 0, digits=1, ops="+"), path)
    dataset = Dataset(team_id=team_id, name="one-digit-addition", row_count=count, checksum="-",
                      size_bytes=path.stat().st_size, storage_path=str(path))
    session.add(dataset)
    session.flush()
    return int(dataset.id)


def long_tail_dataset(session: Any, team_id: int, data_dir: Path, max_k: int) -> int:
    """256 long_tail prompts with repeat counts up to `max_k` (the built-in spec's are up to 32) as an uploaded
    dataset: a longer, more skewed tail of answer lengths."""
    from backend.db import Dataset
    from workers.datasets import write_jsonl
    from workers.datasets.long_tail import generate_rows

    path = data_dir / f"long_tail_k{max_k}.jsonl"
    count = write_jsonl(generate_rows(256, seed=0, max_k=max_k), path)
    dataset = Dataset(team_id=team_id, name=f"long-tail-k{max_k}", row_count=count, checksum="-",
                      size_bytes=path.stat().st_size, storage_path=str(path))
    session.add(dataset)
    session.flush()
    return int(dataset.id)
