"""The `training.run_job` task body: load the job, build its driver over the mode's sample source, run it.

    ctx = load_context(job_id, ...)            # spec, paths, reporter, Redis, driver epoch
    driver = setup_driver(ctx)                 # colocated -> LocalRollout; sync | async -> StreamSource
    driver.run()

The only module that knows every source: the driver and the sources import neither each other nor this module.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import redis

from contract import keys
from contract.reporter import Reporter
from contract.states import TERMINAL_JOB_STATUSES, JobStatus
from workers.runtime.colocated import LocalRollout
from workers.runtime.context import JobContext, JobSetupError, load_context
from workers.runtime.driver import Driver
from workers.runtime.source import SampleSource
from workers.runtime.streaming import StreamSource
from workers.runtime.telemetry import Heartbeat

SOURCES: dict[str, type[SampleSource]] = {"colocated": LocalRollout, "sync": StreamSource, "async": StreamSource}


def setup_driver(ctx: JobContext, **kwargs: Any) -> Driver:
    return Driver(ctx, SOURCES[ctx.spec.mode], **kwargs)


def run_job(job_id: int, reporter: Reporter, client: redis.Redis | None, artifacts: Path,
            node: str | None = None, setup_lock: AbstractContextManager[Any] | None = None) -> str:
    """The `training.run_job` task body (`node`: the Celery worker running it). `setup_lock`: held while the driver
    sets up (a shared training process sets its drivers up one at a time: workers/runtime/shared_training.py)."""
    ctx: JobContext | None = None
    try:
        ctx = load_context(job_id, reporter, client, artifacts, node)
        if ctx.status() in TERMINAL_JOB_STATUSES:
            return f"job {job_id} already ended"
        # the driver beats from here on: loading a large model (or waiting for its ranks) can outlast the heartbeat
        # TTL, and the controller would restart a driver that is only starting; `run` beats with its own
        setup_beat = Heartbeat(lambda: reporter.beat_driver(job_id), name=f"driver-setup-{job_id}").start()
        try:
            with setup_lock or nullcontext():
                driver = setup_driver(ctx)
        finally:
            setup_beat.stop()
    except Exception as err:
        message = str(err) if isinstance(err, JobSetupError) else f"cannot start the job: {type(err).__name__}: {err}"
        reporter.set_job_status(job_id, JobStatus.failed, error=message)
        if client is not None:
            client.set(keys.job_done(job_id), "failed", ex=86400)
        return f"job {job_id} failed: {message}"
    return driver.run()
