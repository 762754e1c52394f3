"""The flat-bucket layout both ends of a p2p group agree on (sent as JSON through the group's TCPStore)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import torch

BUCKET_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    offset: int  # in elements, within the bucket
    numel: int


@dataclass(frozen=True)
class Bucket:
    dtype: str  # "float32", "bfloat16", ...
    numel: int
    slots: tuple[Slot, ...]

    @property
    def torch_dtype(self) -> torch.dtype:
        dtype: torch.dtype = getattr(torch, self.dtype)
        return dtype


def plan_buckets(state: dict[str, torch.Tensor], bucket_bytes: int = BUCKET_BYTES) -> list[Bucket]:
    """Flat buckets of at most `bucket_bytes` (a larger tensor gets one of its own), one dtype each, names sorted."""
    by_dtype: dict[str, list[str]] = {}
    for name in sorted(state):
        by_dtype.setdefault(str(state[name].dtype).removeprefix("torch."), []).append(name)
    buckets: list[Bucket] = []
    for dtype, names in sorted(by_dtype.items()):
        slots: list[Slot] = []
        used = 0
        for name in names:
            tensor = state[name]
            if slots and (used + tensor.numel()) * tensor.element_size() > bucket_bytes:
                buckets.append(Bucket(dtype, used, tuple(slots)))
                slots, used = [], 0
            slots.append(Slot(name, tuple(tensor.shape), used, tensor.numel()))
            used += tensor.numel()
        if slots:
            buckets.append(Bucket(dtype, used, tuple(slots)))
    return buckets


def layout_json(buckets: list[Bucket]) -> str:
    return json.dumps([asdict(b) for b in buckets])


def parse_layout(text: str) -> list[Bucket]:
    return [
        Bucket(
            b["dtype"],
            b["numel"],
            tuple(Slot(s["name"], tuple(s["shape"]), s["offset"], s["numel"]) for s in b["slots"]),
        )
        for b in json.loads(text)
    ]


def flatten_into(bucket: Bucket, state: dict[str, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    flat = out[: bucket.numel]
    for slot in bucket.slots:
        flat[slot.offset : slot.offset + slot.numel].copy_(state[slot.name].reshape(-1))
    return flat


def bucket_views(bucket: Bucket, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    return {s.name: flat[s.offset : s.offset + s.numel].view(s.shape) for s in bucket.slots}
