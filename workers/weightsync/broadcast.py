"""Collective weight transport: torch.distributed broadcast from the trainer (rank 0) to every instance.

gloo on CPU, NCCL on GPUs. The group is fixed when created (rank 0 = trainer, ranks 1.. = generation instances), so
this backend suits a fixed instance set; elastic jobs use the shared store. Each version is one broadcast of a small
header (version) followed by every tensor in sorted-name order; fetchers receive into buffers shaped like `like`.
"""

from __future__ import annotations

from datetime import timedelta

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
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=timeout_s))

    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        assert self.rank == 0, "only the trainer (rank 0) publishes"
        assert sorted(state_dict) == self.names, "published state dict must match the group's tensor names"
        with self._timed("publish", version):
            dist.broadcast(torch.tensor([version], dtype=torch.int64), src=0)
            for name in self.names:
                dist.broadcast(state_dict[name].detach().to("cpu").contiguous(), src=0)
        self._latest = version
        return self.timings.last_seconds

    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        """Receive the next broadcast; it must carry `version` (instances fetch every version in order)."""
        assert self.rank != 0, "rank 0 publishes; it never fetches"
        with self._timed("fetch", version):
            header = torch.zeros(1, dtype=torch.int64)
            dist.broadcast(header, src=0)
            got = int(header.item())
            if got != version:
                raise RuntimeError(f"broadcast carried weights version {got}, expected {version}")
            for name in self.names:
                dist.broadcast(self._buffers[name], src=0)
        self._latest = version
        return {name: buf.clone() for name, buf in self._buffers.items()}

    def latest_version(self) -> int:
        return self._latest

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
