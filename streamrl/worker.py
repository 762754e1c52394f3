"""The Celery worker application: the runtime's tasks bound to the control plane's `DatabaseReporter`.

Thin tasks, ids in: the runtime functions (workers/runtime) do the work and learn about the job only through the
reporter, so they run the same under train-local's in-memory reporter. Start a pool with
`streamrl worker --pool generation|training|control` (or `celery -A streamrl.worker:app worker -Q <pool>`).

A warm shutdown (SIGTERM, or the first Ctrl-C) sets the worker's shutdown flag in Redis; its running tasks see it
with their next heartbeat and hand their work back (workers/runtime/shutdown.py), so the job continues elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

import redis
from celery import Task
from celery.signals import worker_init, worker_process_init, worker_ready, worker_shutting_down

from backend.private_files import restrict_umask
from backend.reporting import DatabaseReporter
from contract import keys, tasks
from contract.devices import DeviceSet, format_device_set, parse_device_sets
from contract.redis_client import connect
from contract.settings import get_settings

log = logging.getLogger(__name__)
app = tasks.make_celery(include=["streamrl.worker"])
restrict_umask()  # checkpoints, weight versions and logs written by the tasks: 0600 files, 0700 directories
REGISTRY_BEAT_S, REGISTRY_TTL_S = 5.0, 20
NODE_ENV = "STREAMRL_WORKER_NODE"  # the worker's node name, for its task processes (set by `streamrl worker`)


def _platform() -> tuple[DatabaseReporter, redis.Redis]:
    client = connect(tasks.platform_redis_url())
    return DatabaseReporter(client), client


@app.task(name=tasks.RUN_INSTANCE, bind=True)
def run_instance(self: Task, job_id: int, instance_id: str) -> str:
    """One generation instance of one job: runs until the job ends or the controller stops the instance."""
    from workers.runtime.instance import run_instance as run

    reporter, client = _platform()
    return run(job_id, instance_id, reporter, client, get_settings().artifacts, node=self.request.hostname)


@app.task(name=tasks.RUN_SHARED, bind=True)
def run_shared(self: Task, key: str) -> str:
    """A shared generation instance: the instances of several LoRA jobs on one base model, in one batch
    (workers/runtime/shared.py); runs while any is placed on it."""
    from workers.runtime.components import worker_device
    from workers.runtime.shared import run_shared as run

    reporter, client = _platform()
    return run(key, reporter, client, get_settings().artifacts, node=self.request.hostname, device=worker_device())


@app.task(name=tasks.RUN_JOB, bind=True)
def run_job(self: Task, job_id: int) -> str:
    """The job driver (data loader, dispatcher, stream consumer, trainer, weight publisher): runs to the job's end."""
    from workers.runtime.job import run_job as run

    reporter, client = _platform()
    return run(job_id, reporter, client, get_settings().artifacts, node=self.request.hostname)


@app.task(name=tasks.RUN_SHARED_TRAINING, bind=True)
def run_shared_training(self: Task, key: str) -> str:
    """A shared training process: the drivers of several LoRA jobs on one base model, in one process and one training
    slot (workers/runtime/shared_training.py); runs while any is placed on it."""
    from workers.runtime.shared_training import run_shared_training as run

    reporter, client = _platform()
    return run(key, reporter, client, get_settings().artifacts, node=self.request.hostname)


@app.task(name=tasks.RUN_RANK, bind=True)
def run_rank(self: Task, job_id: int, epoch: int, rank: int) -> str:
    """Rank `rank` of a job's multi-device trainer: serves its driver (rank 0) until the driver stops it."""
    from workers.runtime.ranks import run_rank as run

    reporter, client = _platform()
    return run(job_id, epoch, rank, reporter, client, get_settings().artifacts, node=self.request.hostname)


@app.task(name=tasks.RUN_INFERENCE, bind=True)
def run_inference(self: Task, key: str, model_dir: str, adapter_dir: str | None) -> str:
    """An on-demand inference instance for one (model, adapter): serves sample requests until idle for
    STREAMRL_INFERENCE_IDLE_S (backend/services/inference.py, workers/runtime/inference.py)."""
    from workers.runtime.components import worker_device
    from workers.runtime.inference import serve

    client = connect(tasks.platform_redis_url())
    return serve(client, key, model_dir, adapter_dir, idle_s=get_settings().inference_idle_s,
                 node=self.request.hostname, device=worker_device())


@app.task(name=tasks.RUN_DEPLOYMENT, bind=True)
def run_deployment(self: Task, deployment_id: int, replica: int) -> str:
    """Replica `replica` of a deployment: its base model and adapters in one multi-LoRA batch, until idle past its
    deployment's idle_s (above min_replicas) or the deployment changes (backend/services/deployments.py)."""
    from workers.runtime.components import worker_device
    from workers.runtime.deployment import serve_replica

    client = connect(tasks.platform_redis_url())
    return serve_replica(client, deployment_id=deployment_id, replica=replica, node=self.request.hostname,
                         device=worker_device())


@app.task(name=tasks.RUN_GRADER)
def run_grader(request_id: str, payload: dict[str, Any]) -> str:
    """POST /graders/run for a spec with model-backed graders: score the sample, push the result to its reply key
    (backend/services/graders.py, workers/rewards/grader_run.py)."""
    from workers.rewards.grader_run import answer
    from workers.runtime.components import worker_device

    answer(connect(tasks.platform_redis_url()), request_id, payload, worker_device())
    return f"grader run {request_id} answered"


@app.task(name=tasks.RUN_EVALUATION)
def run_evaluation(evaluation_id: int) -> str:
    """One evaluation suite on one model, on a generation slot (backend/services/evaluations.py,
    workers/runtime/evaluation.py)."""
    from backend.services.evaluations import DatabaseEvaluationStore, lease_id
    from contract.leases import release
    from workers.runtime.components import worker_device
    from workers.runtime.evaluation import run_evaluation as run

    try:
        return run(evaluation_id, DatabaseEvaluationStore(), worker_device())
    finally:  # its generation slot is free again for the scheduler
        release(connect(tasks.platform_redis_url()), lease_id(evaluation_id))


@app.task(name=tasks.TINKER_SESSION, bind=True)
def tinker_session(self: Task, job_id: int) -> str:
    """A Tinker training session (docs/tinker.md): serves its TrainingClient's requests in seq order, holding one
    training slot, until parked (STREAMRL_TINKER_IDLE_S without a call, or this worker's warm shutdown), closed or
    cancelled."""
    from workers.runtime.components import worker_device
    from workers.runtime.tinker_serve import run_session

    reporter, client = _platform()
    settings = get_settings()
    return run_session(job_id, reporter, client, worker_device(), artifacts=settings.artifacts,
                       idle_s=settings.tinker_idle_s, park_every=settings.tinker_park_every,
                       node=self.request.hostname)


@app.task(name=tasks.RECONCILE)
def reconcile() -> dict[str, int]:
    """One pass of the controller's reconcile loop (the `streamrl controller` process loops over the same function)."""
    from backend.controller.reconcile import reconcile_once

    return reconcile_once().as_dict()


class _Registration:
    """The worker's slots in the registry (`keys.worker_registry`), refreshed every few seconds by a daemon thread of
    the worker's main process; the controller counts free slots per pool from it (capacity-aware placement). Each
    beat also records the tasks running now and a resource sample (streamrl/worker_stats.py: the cluster page)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.entry: dict[str, Any] = {}
        self.gpus: set[int] = set()

    def start(self, consumer: Any) -> None:
        worker = consumer.controller
        queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
        self.entry = {"node": worker.hostname, "queues": queues, "slots": int(worker.concurrency),
                      "host": socket.gethostname(), "pid": os.getpid()}
        sets = _device_sets()
        if sets:
            from workers.devices import device_kind

            self.entry["device_kind"] = device_kind(get_settings().device)
            self.entry["devices"] = [format_device_set(s) for s in sets]
            if self.entry["device_kind"] == "cuda":
                self.gpus = {index for devices in sets for index in devices}
        threading.Thread(target=self._run, name="worker-registry", daemon=True).start()

    def _run(self) -> None:
        from streamrl.worker_stats import ProcessTreeSampler, active_tasks, gpu_stats, push_sample

        client = connect(tasks.platform_redis_url())
        sampler = ProcessTreeSampler(os.getpid())
        while True:
            try:
                sample = sampler.sample()
                if self.gpus:
                    sample["gpus"] = gpu_stats(self.gpus)
                entry = {**self.entry, "tasks": active_tasks(), "beat_at": sample["at"]}
                client.set(keys.worker_registry(self.entry["node"]), json.dumps(entry), ex=REGISTRY_TTL_S)
                push_sample(client, self.entry["node"], sample)
            except redis.RedisError as err:
                log.warning("worker registry: %s", err)
            if self.stop.wait(REGISTRY_BEAT_S):
                client.delete(keys.worker_registry(self.entry["node"]))
                return


_registration = _Registration()


def _device_sets() -> list[DeviceSet]:
    """The worker's device sets: STREAMRL_DEVICES as `streamrl worker --devices` set it (read at call time: the
    settings may have been cached before the CLI set it)."""
    text = os.environ.get("STREAMRL_DEVICES") or get_settings().devices
    return parse_device_sets(text) if text.strip() else []


def device_lock_dir(node: str) -> Path:
    return get_settings().data_dir / "run" / "devices" / node.replace("/", "_")


@worker_process_init.connect
def _pin_to_device_set(**_: Any) -> None:
    """Each task process of a worker started with device sets takes one and runs pinned to it (workers/devices.py)."""
    sets = _device_sets()
    if not sets:
        return
    from workers.devices import claim_device_set, device_kind, pin_process

    node = os.environ.get(NODE_ENV, f"worker-{os.getppid()}")
    index, devices = claim_device_set(sets, device_lock_dir(node))
    kind = device_kind(get_settings().device)
    pin_process(kind, devices)
    log.info("process %d runs on %s set %d: %s", os.getpid(), kind, index, format_device_set(devices))


@worker_init.connect
def _before_forking(sender: Any = None, **_: Any) -> None:
    """In the worker's main process, before it forks its task processes (which inherit what it imported): first
    transformers without scikit-learn (workers/lean_imports.py, ~140 MB of RSS per task process; here rather than in
    each task process: importing transformers' utilities takes ~1 s, and a task process must report up within
    Celery's `worker_proc_alive_timeout` (4 s)), then, on a runtime pool with no GPU, the runtime itself."""
    from workers.lean_imports import skip_sklearn_in_transformers

    skip_sklearn_in_transformers()
    if sender is not None:
        _preload_runtime(set(sender.app.amqp.queues.consume_from or ()))


RUNTIME_POOLS = {"generation", "training"}
# what every task of the runtime pools imports first (~10 s of CPU on a 2-core host, paid once by the main process
# instead of by each task process: they are forked after this and share the pages)
RUNTIME_MODULES = ("torch", "transformers", "transformers.models.qwen2.modeling_qwen2",
                   "transformers.models.llama.modeling_llama", "workers.runtime.instance", "workers.runtime.job",
                   "workers.runtime.ranks", "workers.runtime.shared", "workers.runtime.evaluation")


def _preload_runtime(queues: set[str]) -> None:
    """Import the runtime before the task processes are forked, on a worker of the generation or training pool with
    no GPU. Invariant: nothing here starts a thread, opens a connection or initialises CUDA (a forked process could
    not use them); a GPU host is left alone because a module may query CUDA as it imports."""
    from workers.devices import device_kind

    if not queues & RUNTIME_POOLS or device_kind(get_settings().device) != "cpu":
        return
    import importlib
    import time

    started = time.monotonic()
    for name in RUNTIME_MODULES:
        importlib.import_module(name)
    log.info("runtime imported in %.1f s before forking the task processes", time.monotonic() - started)


@worker_ready.connect
def _register(sender: Any = None, **_: Any) -> None:
    """A (re)started worker under a node name that shut down before starts with no shutdown flag."""
    connect(tasks.platform_redis_url()).delete(keys.worker_shutdown(str(sender.controller.hostname)))
    _registration.start(sender)


@worker_shutting_down.connect
def _hand_work_back(sender: Any = None, **_: Any) -> None:
    """`sender` is the worker's node name (the `-n` of `celery worker`)."""
    _registration.stop.set()
    try:
        connect(tasks.platform_redis_url()).set(keys.worker_shutdown(str(sender)), 1, ex=3600)
    except redis.RedisError as err:  # Redis down too: tasks end when the pool is terminated
        log.warning("could not flag the shutdown of %s: %s", sender, err)
