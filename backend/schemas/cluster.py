"""Schemas of the cluster page: workers by pool and node, who holds their slots, pending instances, queues."""

from __future__ import annotations

from pydantic import BaseModel


class GpuSample(BaseModel):
    index: int
    util_percent: float
    memory_mb: float


class ResourceSample(BaseModel):
    at: float  # epoch seconds
    cpu_percent: float  # the worker's process tree; 100 = one core busy
    memory_mb: float  # resident memory of the worker's process tree
    host_memory_percent: float
    gpus: list[GpuSample] = []


class SlotHolder(BaseModel):
    """A task running on a worker. Another team's job is shown as `other team` (no id, no name)."""

    task: str  # generation.run_instance | training.run_job | training.run_rank
    job_id: int | None
    job_name: str | None
    instance_id: str | None = None
    rank: int | None = None
    # a shared LoRA process (generation.run_shared / training.run_shared) serves several jobs: the caller's own jobs
    # among its members (empty: it serves only other teams' jobs)
    shared: bool = False
    own_jobs: list[int] = []


class WorkerPublic(BaseModel):
    node: str  # the Celery node name (`<pool>-<pid>@<host>`)
    host: str
    pools: list[str]  # the queues it serves
    slots: int  # task processes
    busy: int  # slots running a task now
    device_kind: str | None
    devices: list[str]  # one device set per slot, e.g. ["0-3", "4-7"]
    holders: list[SlotHolder]
    beat_age_s: float | None  # seconds since its last registry beat
    samples: list[ResourceSample]  # oldest first, up to the last 30 minutes


class PoolPublic(BaseModel):
    pool: str
    workers: int
    slots: int
    busy: int
    queue_depth: int  # tasks waiting in the broker's queue for a free slot


class PendingInstance(BaseModel):
    job_id: int
    job_name: str
    instance_id: str
    waited_s: float
    reason: str


class ClusterPublic(BaseModel):
    pools: list[PoolPublic]
    workers: list[WorkerPublic]
    pending: list[PendingInstance]  # the team's instances asked for and not yet picked up by a worker
