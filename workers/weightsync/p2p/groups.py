"""Settings, addresses, stores and two-rank process groups of p2p weight sync (the trainer listens, instances
connect)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

POLL_S = 0.1  # rendezvous polls (Redis)


def timeout_s() -> float:
    return float(os.environ.get("STREAMRL_P2P_TIMEOUT_S", "60"))


def join_timeout_s() -> float:
    return float(os.environ.get("STREAMRL_P2P_JOIN_TIMEOUT_S", "60"))


def port_range() -> list[int]:
    raw = os.environ.get("STREAMRL_P2P_PORTS", "").strip()
    if not raw:
        return [0]  # any free port
    lo, _, hi = raw.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def listen_store(timeout: timedelta) -> dist.TCPStore:
    """A TCPStore master on the first free port of `STREAMRL_P2P_PORTS` (any free port when unset). The server
    listens on every interface; the host given here is only where the master's own client connects."""
    last: Exception | None = None
    for port in port_range():
        try:
            return dist.TCPStore("127.0.0.1", port, 2, is_master=True, wait_for_workers=False, timeout=timeout)
        except Exception as err:  # port taken: try the next one
            last = err
    raise RuntimeError(
        f"no free port for p2p weight sync in STREAMRL_P2P_PORTS={os.environ.get('STREAMRL_P2P_PORTS')}: {last}"
    )


def pick_backend(both_cuda: bool) -> str:
    """`STREAMRL_P2P_BACKEND`: gloo, nccl or auto (the default: NCCL when both ends have a GPU, else gloo)."""
    choice = os.environ.get("STREAMRL_P2P_BACKEND", "auto")
    if choice not in ("auto", "gloo", "nccl"):
        raise ValueError(f"STREAMRL_P2P_BACKEND must be auto, gloo or nccl, not {choice!r}")
    if choice == "nccl" and not both_cuda:
        raise ValueError("STREAMRL_P2P_BACKEND=nccl needs CUDA on the trainer and on the instance")
    return "nccl" if choice == "nccl" or (choice == "auto" and both_cuda) else "gloo"


def make_group(backend: str, store: dist.TCPStore, rank: int, local_ip: str, timeout: timedelta) -> Any:
    """The two-rank group on `store` (never the process's default group: vLLM may hold one); its rendezvous keys
    live under a prefix, apart from the transport's own `layout` and `v/<seq>` keys."""
    prefixed = dist.PrefixStore("group", store)
    gloo: Any = dist.ProcessGroupGloo  # `_Options` (timeout + devices) is missing from torch's stubs
    if backend == "gloo":
        opts = gloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip)]
        return gloo(prefixed, rank, 2, opts)
    nccl = torch.distributed.distributed_c10d.ProcessGroupNCCL  # CUDA builds only
    opts = nccl.Options()
    opts._timeout = timeout
    return nccl(prefixed, rank, 2, opts)


def text_of(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
