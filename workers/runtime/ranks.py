"""Trainer ranks of a job with `training.devices: N` > 1: rank 0 is the driver, ranks 1..N-1 are `training.run_rank`
tasks on the training queue (any training worker, any host), joined through a rendezvous the driver starts.

    trainer = start_trainer(ctx, device)     # driver: N == 1 -> a plain Trainer (no process group, as always);
                                             # N > 1 -> TCPStore + Redis record + N-1 rank tasks + DistributedTrainer
    run_rank(job_id, epoch, rank, ...)       # task body of ranks >= 1: join, then serve rank 0's commands

The driver sends the rank tasks itself (not the controller): only it knows when its store is listening and which
epoch it is, so a restarted driver (a new epoch) simply sends fresh ones, and a rank task left over from an older
epoch sees the epoch in the rendezvous record changed and ends at once. A rank that dies makes the driver's next
collective fail (`RanksLost`): the driver stops without writing the job's status and the controller restarts it
(and so all its ranks) from the newest checkpoint, like a dead driver.

Reachability: ranks >= 1 connect to `<host>:<port>` of the record (STREAMRL_RANK_HOST, default the address of the
interface that routes to Redis, workers/addresses.py; STREAMRL_RANK_PORT, default a free port), then gloo/NCCL open
their own connections between the ranks.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from contract import keys, tasks
from contract.reporter import Reporter
from contract.states import TERMINAL_JOB_STATUSES
from workers.addresses import advertised_host
from workers.runtime import components
from workers.runtime.context import JobContext, JobSetupError, load_context
from workers.training.defaults import choose_training_defaults
from workers.training.faults import RanksLost
from workers.training.trainer import Trainer

log = logging.getLogger(__name__)


def start_trainer(ctx: JobContext, device: str, **trainer_kwargs: Any) -> Trainer:
    """The driver's trainer: one process for `devices: 1`, else rank 0 of `devices` ranks."""
    world = ctx.spec.training.devices
    if world == 1:
        return Trainer(ctx.model_dir, ctx.spec, device, base_cache=ctx.base_cache, **trainer_kwargs)
    import torch  # only multi-rank jobs load torch.distributed's FSDP and DCP
    import torch.distributed as dist

    from workers.training.distributed import DistributedTrainer, RankGroup, rank_timeout_s

    if ctx.redis is None:
        raise JobSetupError(
            f"training.devices: {world} needs the platform's training workers (its ranks are "
            "Celery tasks); train-local trains on one device: set training.devices to 1"
        )
    timeout_s = rank_timeout_s()
    store = dist.TCPStore(
        "0.0.0.0",
        int(os.environ.get("STREAMRL_RANK_PORT", "0")),
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
    )
    record = {
        "host": advertised_host(ctx.redis, "STREAMRL_RANK_HOST"),
        "port": store.port,
        "world": world,
        "epoch": ctx.epoch,
        "trainer": trainer_kwargs,
    }
    ctx.redis.set(keys.trainer_rendezvous(ctx.job_id), json.dumps(record), ex=86400)
    app = tasks.make_celery()
    for rank in range(1, world):
        app.send_task(tasks.RUN_RANK, args=[ctx.job_id, ctx.epoch, rank])
    others = "rank 1" if world == 2 else f"ranks 1-{world - 1}"
    ctx.reporter.record_event(
        ctx.job_id,
        "worker",
        f"training on {world} ranks: waiting for {others} at {record['host']}:{record['port']}",
        data={"ranks": world},
    )
    try:  # the driver's heartbeat goes on meanwhile (run_job's setup heartbeat)
        group = RankGroup(store, 0, world, torch.device(device), timeout_s)
    except RanksLost as err:
        raise JobSetupError(
            f"{err}: a job with training.devices: {world} needs {world} free training worker "
            "slots (start more with `streamrl worker --pool training`)"
        ) from err
    try:
        return DistributedTrainer(ctx.model_dir, ctx.spec, device, group, **trainer_kwargs)
    except BaseException:
        group.close()
        raise


def rank_handing_back(ctx: JobContext) -> bool:
    """The worker of one of this driver's ranks is shutting down (flagged by `run_rank`): hand the job back."""
    if ctx.spec.training.devices == 1 or ctx.redis is None:
        return False
    raw = ctx.redis.get(keys.trainer_handback(ctx.job_id))
    return raw is not None and str(raw.decode() if isinstance(raw, bytes) else raw).split(":")[0] == str(ctx.epoch)


def run_rank(
    job_id: int,
    epoch: int,
    rank: int,
    reporter: Reporter,
    client: redis.Redis,
    artifacts: Path,
    node: str | None = None,
) -> str:
    """The `training.run_rank` task body: join rank 0's rendezvous and serve its commands until it stops."""
    import torch
    import torch.distributed as dist

    from workers.training.distributed import DistributedTrainer, RankGroup, rank_timeout_s, serve

    raw = client.get(keys.trainer_rendezvous(job_id))
    record = json.loads(raw) if raw else None
    if record is None or int(record["epoch"]) != epoch:
        return f"job {job_id} rank {rank}: driver epoch {epoch} is over"
    ctx = load_context(job_id, reporter, client, artifacts, node)
    device = components.worker_device()
    timeout_s = rank_timeout_s()

    def alive() -> bool:
        flag_shutdown()
        return reporter.driver_epoch(job_id) in (None, epoch) and ctx.status() not in TERMINAL_JOB_STATUSES

    def flag_shutdown() -> None:  # this worker is shutting down: ask the driver to hand the job back
        if node is not None and client.exists(keys.worker_shutdown(node)):
            client.set(keys.trainer_handback(job_id), f"{epoch}:{rank}", ex=86400)

    group: RankGroup | None = None
    try:
        store = dist.TCPStore(
            record["host"], int(record["port"]), is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        group = RankGroup(store, rank, int(record["world"]), torch.device(device), timeout_s)
        client.set(
            keys.trainer_rank(job_id, rank),
            json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "node": node, "epoch": epoch}),
            ex=86400,
        )
        spec = choose_training_defaults(ctx.spec, ctx.model_dir, device)[0]  # what rank 0 chose (device-type rules)
        trainer = DistributedTrainer(ctx.model_dir, spec, device, group, **record["trainer"])
        steps = serve(trainer, alive, each=flag_shutdown)
    except (RanksLost, dist.DistError) as err:
        log.warning("job %s rank %s stopped: %s", job_id, rank, err)
        return f"job {job_id} rank {rank} stopped: {err}"
    finally:
        if group is not None:
            group.close()
    return f"job {job_id} rank {rank}: {steps} optimizer steps, stopped by rank 0"
