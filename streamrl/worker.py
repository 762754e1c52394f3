"""Thin Celery tasks: ids in, the plain runtime functions do the work (testable without Celery)."""

from __future__ import annotations

from workers.celery_app import app


@app.task(name="generation.run_instance")
def run_instance(job_id: int, instance_id: str) -> str:
    """One generation instance of one job: runs until the job ends or the controller stops the instance."""
    from workers.runtime.instance import run_instance as run

    return run(job_id, instance_id)


@app.task(name="training.run_job")
def run_job(job_id: int) -> str:
    """The job driver (data loader, dispatcher, stream consumer, trainer, weight publisher): runs to the job's end."""
    from workers.runtime.driver import run_job as run

    return run(job_id)


@app.task(name="control.reconcile")
def reconcile() -> dict[str, int]:
    """One pass of the controller's reconcile loop (the `streamrl controller` process loops over the same function)."""
    from backend.controller.reconcile import reconcile_once

    return reconcile_once().as_dict()
