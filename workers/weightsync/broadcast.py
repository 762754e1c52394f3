"""Collective weight transport: torch.distributed broadcast from the trainer (rank 0) to every instance.

gloo on CPU, NCCL on GPUs. The group is fixed when created (rank 0 = trainer, ranks 1.. = generation instances), so
this backend suits a fixed instance set; elastic jobs use the shared store. Each version is one broadcast of a small
header (version) followed by every tensor in sorted-name order; fetchers receive into buffers shaped like `like`.

The group is a private one built on its own TCPStore, never the process's default group: a worker may already hold
a default group (vLLM in-process creates one), and weight sync must not ride on it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

import torch
import torch.distributed as dist

from workers.weightsync.base import WeightTransport


class BroadcastTransport(WeightTransport):
    def __init__(self, rank: int, world_size: int, init_method: str, like: dict[str, torch.Tensor],
                 backend: str = "gloo", timeout_s: float = 300.0):
        super().__init__()
        self.rank, self.world_size = rank, world_size
        self.names = sorted(like)
        self._buffers = {name: torch.empty_like(like[name], device="cpu").contiguous() for name in self.names}
        self._latest = 0
        self._group = _private_group(backend, init_method, rank, world_size, timedelta(seconds=timeout_s))

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self._group.broadcast(tensor, 0).wait()  # root 0 = the trainer

    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        assert self.rank == 0, "only the trainer (rank 0) publishes"
        assert sorted(state_dict) == self.names, "published state dict must match the group's tensor names"
        with self._timed("publish", version):
            self._broadcast(torch.tensor([version], dtype=torch.int64))
            for name in self.names:
                self._broadcast(state_dict[name].detach().to("cpu").contiguous())
        self._latest = version
        return self.timings.last_seconds

    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        """Receive the next broadcast; it must carry `version` (instances fetch every version in order)."""
        assert self.rank != 0, "rank 0 publishes; it never fetches"
        with self._timed("fetch", version):
            header = torch.zeros(1, dtype=torch.int64)
            self._broadcast(header)
            got = int(header.item())
            if got != version:
                raise RuntimeError(f"broadcast carried weights version {got}, expected {version}")
            for name in self.names:
                self._broadcast(self._buffers[name])
        self._latest = version
        return {name: buf.clone() for name, buf in self._buffers.items()}

    def wait_for(self, version: int, timeout_s: float = 300.0) -> None:
        """Broadcasts arrive in version order; a fetcher receives each one in `fetch`, so there is nothing to poll."""
        if self.rank == 0 and self._latest < version:
            raise RuntimeError(f"the trainer has published version {self._latest}, not {version}")

    def latest_version(self) -> int:
        return self._latest

    def close(self) -> None:
        self._group = None  # dropping the group closes its connections


def _private_group(backend: str, init_method: str, rank: int, world_size: int,
                   timeout: timedelta) -> Any:
    """A process group on a dedicated TCPStore at `init_method` (tcp://host:port; rank 0 hosts the store)."""
    url = urlparse(init_method)
    if url.scheme != "tcp" or url.hostname is None or url.port is None:
        raise ValueError(f"broadcast weight sync needs init_method tcp://host:port, got {init_method!r}")
    store = dist.TCPStore(url.hostname, url.port, world_size, is_master=rank == 0, timeout=timeout)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":
        nccl = torch.distributed.distributed_c10d.ProcessGroupNCCL  # exists in CUDA builds only
        return nccl(store, rank, world_size, nccl.Options())
    raise ValueError(f"broadcast weight sync supports backends gloo and nccl, got {backend!r}")
