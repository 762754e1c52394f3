"""The Celery worker application: the runtime's tasks bound to the control plane's `DatabaseReporter`.

Thin tasks, ids in: the runtime functions (workers/runtime) do the work and learn about the job only through the
reporter, so they run the same under train-local's in-memory reporter. Start a pool with
`streamrl worker --pool generation|training|control` (or `celery -A streamrl.worker:app worker -Q <pool>`).
"""

from __future__ import annotations

import redis

from backend.reporting import DatabaseReporter
from contract import tasks
from contract.settings import get_settings

app = tasks.make_celery(include=["streamrl.worker"])


def _platform() -> tuple[DatabaseReporter, redis.Redis]:
    client = redis.Redis.from_url(tasks.platform_redis_url())
    return DatabaseReporter(client), client


@app.task(name=tasks.RUN_INSTANCE)
def run_instance(job_id: int, instance_id: str) -> str:
    """One generation instance of one job: runs until the job ends or the controller stops the instance."""
    from workers.runtime.instance import run_instance as run

    reporter, client = _platform()
    return run(job_id, instance_id, reporter, client, get_settings().artifacts)


@app.task(name=tasks.RUN_JOB)
def run_job(job_id: int) -> str:
    """The job driver (data loader, dispatcher, stream consumer, trainer, weight publisher): runs to the job's end."""
    from workers.runtime.driver import run_job as run

    reporter, client = _platform()
    return run(job_id, reporter, client, get_settings().artifacts)


@app.task(name=tasks.RECONCILE)
def reconcile() -> dict[str, int]:
    """One pass of the controller's reconcile loop (the `streamrl controller` process loops over the same function)."""
    from backend.controller.reconcile import reconcile_once

    return reconcile_once().as_dict()
