"""A worker process takes one device set of its worker and runs pinned to it (contract/devices.py for the syntax).

Each prefork process of a `streamrl worker --devices ...` claims a free set with an exclusive `flock` on that set's
lock file (held for the process's life, released by the kernel when it dies, so a replacement process takes the
same set) and pins itself: on CPU `sched_setaffinity` to the set's cores and as many torch/OpenMP threads as cores;
on CUDA `CUDA_VISIBLE_DEVICES` (before any CUDA call). Every job part the process runs (an instance, a driver and its
trainer) inherits the pinning; `STREAMRL_DEVICE_SET` names the set for logs and events.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from contract.devices import DeviceSet, format_device_set

ENV_DEVICE_SET = "STREAMRL_DEVICE_SET"


class NoFreeDeviceSet(RuntimeError):
    pass


def device_kind(configured: str) -> str:
    """`cuda` or `cpu` for settings.device, without initialising CUDA (a forked process could not use it after)."""
    if configured != "auto":
        return "cuda" if configured.startswith("cuda") else "cpu"
    gpus = Path("/proc/driver/nvidia/gpus")
    return "cuda" if gpus.is_dir() and any(gpus.iterdir()) else "cpu"


def claim_device_set(sets: list[DeviceSet], lock_dir: Path) -> tuple[int, DeviceSet]:
    """The first set no other live process of this worker holds; NoFreeDeviceSet when all are held."""
    lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for index, devices in enumerate(sets):
        fd = os.open(lock_dir / f"set-{index}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.set_inheritable(fd, False)
        return index, devices  # fd stays open: the lock lives as long as this process
    raise NoFreeDeviceSet(f"all {len(sets)} device sets of this worker are held by its other processes")


def pin_process(kind: str, devices: DeviceSet) -> None:
    """Run this process (and what it starts) on `devices` only."""
    if kind == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
    else:
        os.sched_setaffinity(0, devices)
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(len(devices))
        import torch

        torch.set_num_threads(len(devices))
    os.environ[ENV_DEVICE_SET] = f"{kind}:{format_device_set(devices)}"


def current_device_set() -> str | None:
    """`cpu:0-3` / `cuda:0` when this process was pinned by `pin_process`."""
    return os.environ.get(ENV_DEVICE_SET)
