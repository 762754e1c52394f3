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


def gpu_identity(device: torch.device) -> str | None:
    """The physical GPU behind `device` (its UUID, the same in every process whatever CUDA_VISIBLE_DEVICES says);
    None on CPU or where torch does not report it."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    text = str(uuid) if uuid is not None else ""
    return text if text and not text.startswith("<") else None  # "<... object at 0x...>" would name no GPU


def pick_backend(trainer_cuda: bool, instance_cuda: bool, trainer_gpu: str | None, instance_gpu: str | None) -> str:
    """`STREAMRL_P2P_BACKEND`: gloo, nccl or auto (the default: NCCL between two different GPUs, else gloo).

    NCCL cannot connect two ranks on one GPU ("Duplicate GPU detected"): a trainer and an instance sharing a GPU
    (one-GPU hosts) sync over gloo, as do ends whose GPU identity is unknown."""
    choice = os.environ.get("STREAMRL_P2P_BACKEND", "auto")
    if choice not in ("auto", "gloo", "nccl"):
        raise ValueError(f"STREAMRL_P2P_BACKEND must be auto, gloo or nccl, not {choice!r}")
    both_cuda = trainer_cuda and instance_cuda
    if choice == "nccl" and not both_cuda:
        raise ValueError("STREAMRL_P2P_BACKEND=nccl needs CUDA on the trainer and on the instance")
    distinct = trainer_gpu is not None and instance_gpu is not None and trainer_gpu != instance_gpu
    if choice == "nccl" and trainer_gpu is not None and trainer_gpu == instance_gpu:
        raise ValueError(f"STREAMRL_P2P_BACKEND=nccl: the trainer and the instance share one GPU ({trainer_gpu}), "
                         "and NCCL cannot connect two ranks on one GPU: use auto or gloo")
    return "nccl" if choice == "nccl" or (choice == "auto" and both_cuda and distinct) else "gloo"


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
