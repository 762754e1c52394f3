"""API load benchmark: p50/p99 latency and requests/s of what a dashboard polls (`GET /jobs`, `GET /jobs/{id}`,
`GET /jobs/{id}/iterations`, `GET /jobs/{id}/samples`, in turn) under 50 concurrent clients, with one job running
that has a few hundred iterations and their samples recorded. Each route's p99 is printed too.

The running job's writes are the driver's: `DatabaseReporter` (the same class the runtime uses, on the live channel
of the same Redis) records an iteration with its samples and an event every `--write-interval` seconds while the
clients poll. No model runs: the figures are the API's, not the CPU a training job would take from it.

Starts its own API server (uvicorn, the same factory `streamrl up` runs) on a fresh database: PostgreSQL
(STREAMRL_BENCH_DATABASE_URL, default the local server) or `--sqlite`. Each configuration is measured in this process:
the baseline is one uvicorn worker, the candidate `--workers N` (default: the CPU count).

Run: `python bench/api_load.py [--requests 2000] [--clients 50] [--sqlite] [--write-interval 0.5]`.
Final line: `RESULT p50_ms=... p99_ms=... req_s=... baseline_p99_ms=... p99_ratio=...` (and one `RESULT route=...`
line per route of the candidate).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.db.migrate import upgrade_database  # noqa: E402
from backend.db.models import Iteration, Job, JobSample, Membership, Model, Team, User  # noqa: E402
from backend.db.session import make_engine, normalize_database_url, session_scope  # noqa: E402
from backend.reporting import DatabaseReporter  # noqa: E402
from backend.services.auth import issue_session_token  # noqa: E402
from backend.services.jobs import create_job  # noqa: E402
from contract.spec import JobSpec  # noqa: E402
from contract.states import JobStatus  # noqa: E402

SECRET = "bench-secret-key-0123456789abcdef"
METRICS = {"reward_mean": 0.5, "gen_seconds": 1.0, "train_seconds": 0.5, "samples_per_s": 30.0, "len_p50": 12.0,
           "len_p99": 40.0, "lengths": list(range(64))}  # one iteration's metrics, as a driver records them
REDIS_URL = os.environ.get("STREAMRL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fresh_database(sqlite: bool, workdir: Path) -> str:
    if sqlite:
        url = f"sqlite:///{workdir / 'bench.db'}"
    else:
        server = make_url(normalize_database_url(os.environ.get(
            "STREAMRL_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")))
        name = f"streamrl_bench_{uuid.uuid4().hex[:10]}"
        with create_engine(server, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = server.set(database=name).render_as_string(hide_password=False)
    upgrade_database(url)
    return url


def seed(url: str, workdir: Path, jobs: int, iterations: int) -> tuple[str, int]:
    """A team with `jobs` jobs, the first with `iterations` metric rows; returns (token, that job's id)."""
    engine = make_engine(url)
    model_dir = workdir / "artifacts" / "models" / "m"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text('{"model_type": "llama"}')
    with session_scope(engine) as session:
        team = Team(name="bench", max_concurrent_jobs=1000, max_generation_instances=10_000)
        user = User(email="bench@example.com")
        session.add_all([team, user])
        session.flush()
        session.add(Membership(team_id=team.id, user_id=user.id, role="owner"))
        session.add(Model(team_id=team.id, name="m", path=str(model_dir), created_by_id=user.id))
        session.flush()
        spec = JobSpec.model_validate({"model": "m", "dataset": {"builtin": "arithmetic"}})
        ids = [create_job(session=session, team=team, user=user, spec=spec).id for _ in range(jobs)]
        session.get(Job, ids[0]).status = JobStatus.running  # type: ignore[union-attr]
        session.add_all(Iteration(job_id=ids[0], iteration=i + 1, metrics=METRICS) for i in range(iterations))
        session.add_all(JobSample(job_id=ids[0], iteration=i + 1, sample_id=f"{ids[0]}:{i + 1}:{k}", prompt=f"q{k}",
                                  response="a" * 40, reward=1.0, length=40, policy_version=i, instance_id="gen-0")
                        for i in range(iterations) for k in range(4))
        token = issue_session_token(user_id=user.id, team_id=team.id, secret_key=SECRET, ttl_s=3600)
    engine.dispose()
    return token, ids[0]


def start_api(url: str, workdir: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "STREAMRL_DATABASE_URL": url, "STREAMRL_DATA_DIR": str(workdir),
           "STREAMRL_SECRET_KEY": SECRET, "STREAMRL_AUTO_MIGRATE": "false", "STREAMRL_REDIS_URL": REDIS_URL}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "backend.main:create_app", "--factory", "--port",
                             str(port), "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
                            env=env, cwd=REPO)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"{base}/api/v1/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the API did not start")


class RawClient:
    """A minimal keep-alive HTTP/1.1 GET client on asyncio streams: ~20x cheaper per request than httpx, so the
    load generator (same 2 cores as the server) measures the server, not itself. Reads Content-Length bodies only
    (what the API sends for these routes)."""

    def __init__(self, host: str, port: int, token: str):
        self.host, self.port, self.token = host, port, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                          "Accept: application/json\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


ROUTES = ("/jobs", "/jobs/{id}", "/jobs/{id}/iterations?limit=500", "/jobs/{id}/samples?limit=50")


def routes(job_id: int) -> list[str]:
    return ["/api/v1" + route.replace("{id}", str(job_id)) for route in ROUTES]


async def load(base: str, token: str, job_id: int, requests: int,
               clients: int) -> tuple[list[tuple[str, float]], float, int]:
    """`requests` GETs from `clients` concurrent clients, the routes in turn; ((path, latency s), wall s, errors)."""
    paths = routes(job_id)
    latencies: list[tuple[str, float]] = []
    errors = 0
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(paths[i % len(paths)])
    host, _, port = base.removeprefix("http://").partition(":")

    async def client() -> None:
        nonlocal errors
        http = RawClient(host, int(port), token)
        try:
            while not queue.empty():
                path = queue.get_nowait()
                start = time.perf_counter()
                status = await http.get(path)
                latencies.append((path, time.perf_counter() - start))
                errors += status != 200
        finally:
            await http.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - started, errors


class RunningJob:
    """The job's driver writes while the clients poll: an iteration (metrics + samples) and an event every
    `interval` seconds, through `DatabaseReporter`."""

    def __init__(self, job_id: int, first_iteration: int, interval: float):
        self.job_id, self.iteration, self.interval = job_id, first_iteration, interval
        self.reporter = DatabaseReporter(redis.Redis.from_url(REDIS_URL))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.iteration += 1
            samples = [{"iteration": self.iteration, "sample_id": f"{self.job_id}:{self.iteration}:{i}",
                        "prompt": f"q{i}", "response": "a" * 40, "reward": 1.0, "length": 40,
                        "policy_version": self.iteration - 1} for i in range(4)]
            self.reporter.record_iteration(self.job_id, self.iteration, METRICS, samples)
            self.reporter.record_event(self.job_id, "iteration", f"iteration {self.iteration} trained")

    def __enter__(self) -> RunningJob:
        if self.interval > 0:
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


def measure(url: str, workdir: Path, token: str, job_id: int, workers: int, args: argparse.Namespace,
            job: RunningJob) -> dict:
    proc, base = start_api(url, workdir, workers)
    try:
        asyncio.run(load(base, token, job_id, min(200, args.requests), args.clients))  # warm up
        written = job.iteration
        latencies, wall, errors = asyncio.run(load(base, token, job_id, args.requests, args.clients))
        written = job.iteration - written
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ordered = sorted(seconds for _, seconds in latencies)
    per_route = {route: p99([s for p, s in latencies if p == path])
                 for route, path in zip(ROUTES, routes(job_id), strict=True)}
    figures = {"workers": workers, "p50_ms": 1000 * statistics.median(ordered), "p99_ms": 1000 * p99(ordered),
               "req_s": len(ordered) / wall, "errors": errors, "routes": per_route}
    print(f"workers={workers}: p50 {figures['p50_ms']:.0f} ms, p99 {figures['p99_ms']:.0f} ms, "
          f"{figures['req_s']:.0f} req/s, {errors} errors; the running job recorded {written} iterations meanwhile; "
          "p99 per route: " + ", ".join(f"{route} {1000 * value:.0f} ms" for route, value in per_route.items()),
          flush=True)
    return figures


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=30, help="jobs in the team (the list page)")
    parser.add_argument("--iterations", type=int, default=300, help="iterations of the polled job")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    parser.add_argument("--write-interval", type=float, default=0.5,
                        help="seconds between the running job's iterations (0: the job writes nothing)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamrl-bench-") as tmp:
        workdir = Path(tmp)
        url = fresh_database(args.sqlite, workdir)
        token, job_id = seed(url, workdir, args.jobs, args.iterations)
        print(f"database: {'sqlite' if args.sqlite else 'postgres'}; {args.jobs} jobs, {args.iterations} iterations "
              f"on job {job_id} (running: an iteration every {args.write_interval} s); {args.requests} GETs from "
              f"{args.clients} clients", flush=True)
        os.environ["STREAMRL_DATABASE_URL"] = url  # DatabaseReporter's sessions
        with RunningJob(job_id, args.iterations, args.write_interval) as job:
            baseline = measure(url, workdir, token, job_id, 1, args, job)
            candidate = measure(url, workdir, token, job_id, args.workers, args, job)
    print(f"RESULT p50_ms={candidate['p50_ms']:.1f} p99_ms={candidate['p99_ms']:.1f} req_s={candidate['req_s']:.1f} "
          f"baseline_p99_ms={baseline['p99_ms']:.1f} p99_ratio={candidate['p99_ms'] / baseline['p99_ms']:.2f} "
          f"errors={candidate['errors'] + baseline['errors']}")
    for route, value in candidate["routes"].items():
        print(f"RESULT route={route.split('?')[0]} p99_ms={1000 * value:.1f}")


if __name__ == "__main__":
    main()
