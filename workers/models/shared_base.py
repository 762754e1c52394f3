"""Frozen weights mapped from one file per base model, so every training process on a host shares one copy.

    mapped = map_frozen_weights([policy, reference], model_dir, cache_dir)   # after LoRA wrapping, before compile

A LoRA job trains only its adapter; its base model is frozen, as is a full fine-tune's KL reference. Four jobs on one
base model would hold four private copies of those tensors. Here the frozen parameters are written once, in the
order and dtype the model holds them, to `<cache_dir>/<key>.bin`, and each process points them at a private
read-only-in-practice mapping of that file (`MAP_PRIVATE`): the kernel backs every process's mapping with the same
page-cache pages, so N processes cost one copy. Invariants:
- the key covers the model directory's weight files (path, size, mtime), the parameters' names, shapes and dtypes,
  and the torch / transformers versions that produced them: a file is only ever reused for identical tensors;
- a file appears whole or not at all (written to a temporary name, fsynced, renamed), and once per host: processes
  that start together check and write under an exclusive lock on the cache directory, so none replaces a file
  another has already mapped (that mapping would then hold a deleted copy of its own);
- nothing writes a frozen tensor; if something did, copy-on-write gives that process its own page and the file and
  the other processes stay unchanged (correctness never depends on sharing);
- a cache file may be deleted at any time (pruning, an operator): processes that mapped it keep their pages.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from torch import nn

ALIGN = 64  # bytes: each tensor starts on a cache line (and on its dtype's alignment)
UNUSED_DAYS = 14  # a cache file no process has mapped for this long is removed when another is written
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WRITING = threading.Lock()  # one thread of a process writes or maps a file at a time
_MAPPINGS: weakref.WeakValueDictionary[tuple[str, int], torch.UntypedStorage] = weakref.WeakValueDictionary()
# (cache key, device, name) -> the parameter of this process that holds that frozen tensor (while its module lives)
_RESIDENT: weakref.WeakValueDictionary[tuple[str, str, str], nn.Parameter] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class MappedBase:
    path: Path
    nbytes: int
    tensors: int
    written: bool  # this process wrote the file (the first job on this base model on this host)

    def describe(self) -> str:
        how = "wrote" if self.written else "mapped the existing"
        return (f"frozen base weights ({self.tensors} tensors, {self.nbytes / 2**20:.1f} MiB): {how} shared copy "
                f"{self.path.name}; this host's training and shared generation processes hold one copy")


def frozen_parameters(modules: Iterable[nn.Module],
                      device: torch.device | str = "cpu") -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every frozen parameter on `device` ("cuda" matches any GPU, "cuda:1" that one), each
    once (tied weights are one parameter)."""
    seen: set[int] = set()
    found: list[tuple[str, nn.Parameter]] = []
    want = torch.device(device)
    for module in modules:
        for name, param in module.named_parameters():
            on_device = param.device.type == want.type and want.index in (None, param.device.index)
            if param.requires_grad or not on_device or id(param) in seen or param.numel() == 0:
                continue
            seen.add(id(param))
            found.append((canonical_name(name), param))
    return found


def canonical_name(name: str) -> str:
    """The HF name of a parameter, whatever wraps it: a LoRA job's base model and a full fine-tune's reference then
    have the same key and share one file."""
    return name.removeprefix("base_model.model.").replace(".base_layer.", ".").replace("_orig_mod.", "")


def _layout(params: list[tuple[str, nn.Parameter]]) -> tuple[list[int], int]:
    offsets, end = [], 0
    for _, param in params:
        end = -(-end // ALIGN) * ALIGN
        offsets.append(end)
        end += param.numel() * param.element_size()
    return offsets, end


def cache_key(model_dir: Path, params: list[tuple[str, nn.Parameter]]) -> str:
    files = sorted(
        (path.name, path.stat().st_size, path.stat().st_mtime_ns)
        for path in Path(model_dir).iterdir() if path.suffix in WEIGHT_SUFFIXES and path.is_file()
    )
    identity = {
        "model_dir": str(Path(model_dir).resolve()), "files": files,
        "tensors": [(name, list(param.shape), str(param.dtype)) for name, param in params],
        "torch": torch.__version__, "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _write(path: Path, params: list[tuple[str, nn.Parameter]], offsets: list[int], nbytes: int) -> None:
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as out:
            for (_, param), offset in zip(params, offsets, strict=True):
                out.seek(offset)
                out.write(param.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            out.truncate(nbytes)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _prune(cache_dir: Path, keep: Path) -> None:
    cutoff = time.time() - UNUSED_DAYS * 86400
    for entry in cache_dir.glob("*.bin"):
        try:
            if entry != keep and entry.stat().st_mtime < cutoff:
                entry.unlink()
        except FileNotFoundError:  # another process pruned it first
            pass


@contextlib.contextmanager
def _host_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path`'s directory, across processes (flock on the directory itself: no lock file)."""
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
        yield
    finally:
        os.close(fd)


def _release_freed_heap() -> None:
    """Hand the private copies just freed back to the OS (glibc keeps freed heap otherwise)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: this process reuses the memory instead
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _mapping(path: Path, nbytes: int) -> torch.UntypedStorage:
    """This process's mapping of a file: every module of the process that maps it (the drivers of a shared training
    process, a shared generation engine) points into one mapping, held while any tensor uses it."""
    with _WRITING:
        found = _MAPPINGS.get((str(path), nbytes))
        if found is not None:
            return found
        storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=nbytes)
        assert isinstance(storage, torch.UntypedStorage)
        _MAPPINGS[(str(path), nbytes)] = storage
        return storage


def map_frozen_weights(modules: Iterable[nn.Module], model_dir: Path, cache_dir: Path) -> MappedBase | None:
    """Point every frozen CPU parameter of `modules` at the host's shared copy (written on first use).
    None when there is nothing frozen on the CPU (a full fine-tune without a reference, or a GPU)."""
    params = frozen_parameters(modules)
    if not params:
        return None
    cache_dir = Path(cache_dir)
    offsets, nbytes = _layout(params)
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = cache_dir / f"{cache_key(model_dir, params)}.bin"
    with _WRITING, _host_lock(path):  # threads of one process, and processes of one host, write a file once
        written = not (path.is_file() and path.stat().st_size == nbytes)
        if written:
            _write(path, params, offsets, nbytes)
            _prune(cache_dir, keep=path)
        else:
            os.utime(path)  # "last used": pruning removes files no job has mapped for UNUSED_DAYS
    storage = _mapping(path, nbytes)
    with torch.no_grad():
        for (_, param), offset in zip(params, offsets, strict=True):
            mapped = torch.empty(0, dtype=param.dtype)
            mapped.set_(storage, offset // param.element_size(), param.shape)  # type: ignore[call-overload]
            param.data = mapped
    _release_freed_heap()
    return MappedBase(path=path, nbytes=nbytes, tensors=len(params), written=written)


def share_resident_weights(modules: Iterable[nn.Module], model_dir: Path, device: torch.device) -> int:
    """Within one process: point the frozen parameters of `modules` on `device` at those of a module loaded earlier
    from the same base model and still alive (the drivers of a shared training process on a GPU, or with no host
    cache). Returns the bytes this saved. The first module's parameters are the ones kept; a later module's own copy
    is freed. Tensors are shared only between identical keys (`cache_key`: same files, names, shapes, dtypes)."""
    params = frozen_parameters(modules, device)
    if not params:
        return 0
    key, saved = cache_key(model_dir, params), 0
    with _WRITING, torch.no_grad():
        for name, param in params:
            where = (key, str(param.device), name)
            held = _RESIDENT.get(where)
            if held is None or held is param:
                _RESIDENT[where] = param
            elif held.data.data_ptr() != param.data.data_ptr():
                param.data = held.data
                saved += param.numel() * param.element_size()
    return saved
