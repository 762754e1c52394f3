"""The process group of one job's trainer ranks and the command channel from rank 0 to the others.

    group = RankGroup(store, rank, world, device)   # torch.distributed over a TCPStore rendezvous
    rank 0:       group.send(op, shares)            # one JSON command per other rank: `cmd/<seq>/<rank>` keys
    ranks >= 1:   op, arg = group.receive(alive)    # waits as long as its driver still runs the job

A rank waits for its next command through the store, not inside a collective, so a paused job or a slow generation
never times a collective out; collectives (`all_reduce_sum`, and every call wrapped in `_collective`) run only once
every rank has its command, under the group's timeout, and a transport failure between ranks becomes `RanksLost`.
The trainer that uses the group is `workers/training/distributed.py`.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from contract.sample import Sample
from workers.training.faults import RanksLost

LOST_RANK = re.compile(r"gloo|nccl|connection|timed out|timeout|peer", re.IGNORECASE)
WAIT_POLL_S = 30.0  # a rank waiting for its next command re-checks that its driver still runs the job this often
# (a rank 0 that died is noticed at once: its store's connection drops)


def rank_timeout_s() -> float:
    """Seconds a collective (or the rendezvous) may wait for the other ranks: STREAMRL_RANK_TIMEOUT_S, default 300."""
    return float(os.environ.get("STREAMRL_RANK_TIMEOUT_S", "300"))


class RankGroup:
    """The process group of one job's trainer ranks and the command channel from rank 0 to the others."""

    def __init__(
        self, store: dist.Store, rank: int, world: int, device: torch.device, timeout_s: float | None = None
    ) -> None:
        self.store, self.rank, self.world = store, rank, world
        self.timeout = timedelta(seconds=timeout_s if timeout_s is not None else rank_timeout_s())
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device.index or 0)  # one GPU per rank: a worker sees its own (CUDA_VISIBLE_DEVICES)
        if dist.is_initialized():  # a worker process runs one trainer at a time: an earlier job's group is stale
            dist.destroy_process_group()
        try:
            dist.init_process_group(
                backend, store=dist.PrefixStore("pg", store), rank=rank, world_size=world, timeout=self.timeout
            )
        except Exception as err:  # a rank never joined (no free training slot, or it died starting up)
            raise RanksLost(
                f"trainer rank {rank}: the {world} ranks did not all join within "
                f"{self.timeout.total_seconds():.0f}s ({type(err).__name__}: {err})"
            ) from err
        # a name of this group's own: DeviceMesh compares by shape and names, and a process that served an earlier
        # (failed) group would otherwise get that group's cached mesh back, with its old coordinate
        if rank == 0:
            store.set("mesh", f"ranks-{uuid.uuid4().hex[:12]}")
        name = store.get("mesh").decode()
        self.mesh: DeviceMesh = init_device_mesh(device.type, (world,), mesh_dim_names=(name,))
        self.seq = 0

    # -- commands (rank 0 -> the others) ------------------------------------------------------------------------------
    def send(self, op: str, shares: Sequence[Any]) -> None:
        """Rank 0: command `op` with argument `shares[r]` for every rank r >= 1."""
        assert self.rank == 0 and len(shares) == self.world
        self.seq += 1
        try:
            for rank in range(1, self.world):
                self.store.set(f"cmd/{self.seq}/{rank}", json.dumps({"op": op, "arg": shares[rank]}))
        except Exception as err:
            raise RanksLost(f"could not reach the trainer ranks' store: {err}") from err

    def receive(self, alive: Callable[[], bool]) -> tuple[str, Any]:
        """Ranks >= 1: the next command; waits as long as `alive()` (this rank's driver still runs the job)."""
        self.seq += 1
        key = f"cmd/{self.seq}/{self.rank}"
        while True:
            try:
                self.store.wait([key], timedelta(seconds=WAIT_POLL_S))
                break
            except Exception as err:
                if "timeout" not in str(err).lower():  # the store (rank 0's process) is gone
                    raise RanksLost(f"rank {self.rank}: lost rank 0 ({err})") from err
                if not alive():
                    raise RanksLost(f"rank {self.rank}: its driver no longer runs the job") from err
        payload = self.store.get(key)
        self.store.delete_key(key)
        command = json.loads(payload)  # JSON, not pickle: a stray peer on the port cannot run code here
        return str(command["op"]), command["arg"]

    # -- collectives ---------------------------------------------------------------------------------------------------
    def all_reduce_sum(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64)
        if dist.get_backend() == "nccl":
            tensor = tensor.cuda()
        self._collective(lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM))
        return [float(v) for v in tensor.cpu()]

    def _collective(self, call: Callable[[], Any]) -> Any:
        """Run `call` (which takes part in collectives); a failure of the transport between ranks is `RanksLost`,
        any other error (a bug, out of memory) propagates as itself."""
        try:
            return call()
        except RanksLost:
            raise
        except RuntimeError as err:  # gloo raises plain RuntimeErrors ("Connection closed by peer", "Timed out")
            if isinstance(err, dist.DistError) or LOST_RANK.search(str(err)):
                raise RanksLost(f"trainer rank {self.rank}: a collective failed ({err})") from err
            raise

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def split_shares(
    samples: Sequence[Sample], advantages: Sequence[float], world: int
) -> list[tuple[list[Sample], list[float]]]:
    """Deal a micro-batch to `world` ranks, longest first to the rank with the fewest tokens (balanced work)."""
    shares: list[tuple[list[Sample], list[float]]] = [([], []) for _ in range(world)]
    load = [0] * world
    order = sorted(range(len(samples)), key=lambda i: -(len(samples[i].prompt_ids) + len(samples[i].response_ids)))
    for index in order:
        rank = min(range(world), key=lambda r: (load[r], r))
        shares[rank][0].append(samples[index])
        shares[rank][1].append(advantages[index])
        load[rank] += len(samples[index].prompt_ids) + len(samples[index].response_ids)
    return shares
