"""Celery queues, task names and broker settings: what the controller sends and the workers run.

Broker = the platform's Redis; three queues routed by task-name prefix: `generation.*` -> `generation` (one process per
accelerator), `training.*` -> `training` (job drivers), `control.*` -> `control`. Tasks are long-running (a whole job or
instance), so a worker takes a task only when one of its processes is free (`worker_disable_prefetch`: a busy worker
never hoards tasks another could run) and acknowledges it when it starts. The broker never redelivers a task: a lost
one is restarted by the controller, which owns desired state, and tasks are idempotent on their ids. (Acknowledging
at the end would leave acknowledgements pending across a broker restart, which the Redis transport cannot send on the
new connection: the worker would crash.) The control plane sends tasks by name (`make_celery()` without task
modules); the worker application (`streamrl.worker`) registers the same names.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from contract.settings import get_settings

RUN_INSTANCE = "generation.run_instance"
RUN_JOB = "training.run_job"
RUN_RANK = "training.run_rank"  # ranks 1..N-1 of a multi-device trainer, sent by its driver (rank 0)
RECONCILE = "control.reconcile"
TINKER_SESSION = "training.tinker_session"  # a Tinker training session (backend/services/tinker.py, docs/tinker.md)
RUN_INFERENCE = "generation.run_inference"  # an on-demand inference instance (backend/services/inference.py)
RUN_SHARED = "generation.run_shared"  # a shared generation instance: several LoRA jobs on one base model
RUN_SHARED_TRAINING = "training.run_shared"  # a shared training process: several LoRA jobs' drivers, one base model
RUN_GRADER = "generation.run_grader"  # one sample scored by model-backed graders (backend/services/graders.py)
RUN_EVALUATION = "generation.run_evaluation"  # one evaluation suite on one model (backend/services/evaluations.py)
RUN_DEPLOYMENT = "generation.run_deployment"  # one replica of a deployment (backend/services/deployments.py)
BROKER_POLL_S = 10.0
TASK_ROUTES = {
    "generation.*": {"queue": "generation"},
    "training.*": {"queue": "training"},
    "control.*": {"queue": "control"},
}


def platform_redis_url() -> str:
    """The Redis every runtime part talks to: settings.redis_url, or the embedded server's socket under data_dir."""
    settings = get_settings()
    if settings.redis_url:
        return settings.redis_url
    socket = Path(settings.data_dir) / "redis" / "redis.sock"
    return f"unix://{socket}"


def celery_broker_url(redis_url: str) -> str:
    """Celery (kombu) spells a unix-socket Redis `redis+socket://PATH`; redis-py spells it `unix://PATH`."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


def make_celery(redis_url: str | None = None, include: list[str] | None = None) -> Celery:
    broker = celery_broker_url(redis_url or platform_redis_url())
    app = Celery("streamrl", broker=broker, include=include or [])
    app.conf.update(
        task_routes=TASK_ROUTES,
        task_default_queue="control",
        task_acks_late=False,
        worker_disable_prefetch=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_connection_retry=True,
        broker_connection_max_retries=None,  # a broker restart stalls the worker; it never gives up on its own
        broker_transport_options={
            "visibility_timeout": int(os.environ.get("STREAMRL_VISIBILITY_TIMEOUT_S", 86400)),
            # an idle worker blocks in BRPOP this long per call (a task arrival returns it at once): 1 s (kombu's
            # default) re-issues it every second on every worker, the bulk of an idle platform's CPU
            "polling_interval": BROKER_POLL_S,
        },
        worker_hijack_root_logger=False,
        # a running driver or instance does not need the broker: a broker restart must not cancel it
        worker_cancel_long_running_tasks_on_connection_loss=False,
    )
    return app
