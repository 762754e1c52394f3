"""A job that needs a piece the workers' host lacks (bubblewrap, for a python reward) fails at once with one clear
line in its events, and the workers' logs stay quiet: no traceback per task, no Celery banner or superuser warning.
Real Postgres, Redis and `streamrl worker` processes on a PATH without bwrap."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from runtime_platform import REPO, Platform, wait_until

from backend.db import JobStatus

pytestmark = pytest.mark.integration

GOOD = "def reward(prompt, response, meta):\n    return float(response.strip() == meta['answer'])\n"


def _streamrl_worker(platform: Platform, pool: str, log: Path) -> subprocess.Popen[bytes]:
    """`streamrl worker --pool POOL` as an operator starts it (not under `streamrl up`)."""
    env = {k: v for k, v in platform.env.items() if k != "STREAMRL_SUPERVISED"}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "streamrl.cli.main", "worker", "--pool", pool,
                                 "--concurrency", "2"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def test_missing_jail_fails_the_job_with_one_line_and_no_tracebacks(pg_backend, redis_url: str, tiny_model_dir: Path,
                                                                     path_without_bwrap: str) -> None:
    logs = Path(pg_backend.settings.data_dir) / f"host-missing-{uuid.uuid4().hex[:6]}"
    logs.mkdir(parents=True)
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), path_without_bwrap])}
    with Platform.start(pg_backend, redis_url, tiny_model_dir, extra_env=env, start_workers=False) as platform:
        for pool in ("generation", "training"):  # the workers the CLI starts
            platform.workers[pool] = _streamrl_worker(platform, pool, logs / f"{pool}.log")

        def worker_logs() -> str:
            return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')}" for p in sorted(logs.iterdir()))

        wait_until(lambda: all("ready." in (logs / f"{p}.log").read_text() for p in ("generation", "training")),
                   120, "both workers ready", worker_logs)
        job_id = platform.submit(reward={"type": "python", "code": GOOD})
        job = wait_until(lambda: (j := platform.job(job_id)).status == JobStatus.failed and j, 240,
                         "the job to fail", worker_logs)
        assert job.error.startswith("reward: python rewards need the reward jail, which cannot be built here: "
                                    "bubblewrap is not installed"), job.error
        mentions = [event for event in platform.events(job_id) if "bubblewrap" in event]
        assert len(mentions) == 1 and mentions[0].endswith(job.error), platform.events(job_id)
        wait_until(lambda: "bubblewrap is not installed" in worker_logs(), 60, "the worker's one line", worker_logs)
        text = worker_logs()  # before the platform stops the workers (a killed pool child logs its own loss)
    assert "Traceback" not in text and "raised unexpected" not in text, text[-4000:]
    assert "superuser privileges" not in text and "-------------- [queues]" not in text, text[:3000]
    if os.geteuid() == 0:  # said once per worker, in one line, instead of Celery's banner
        assert text.count("worker: running as root") == 2, text[:3000]
