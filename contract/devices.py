"""Device sets: the devices a worker owns, one set per slot (`streamrl worker --devices` / STREAMRL_DEVICES).

Syntax: sets separated by `;`, ids within a set by `,`, ranges with `-`: `0-3;4-7` is two slots of four. The ids are
CPU core numbers on a CPU worker and GPU ordinals on a CUDA worker (settings.device). A set belongs to exactly one
slot: sets may not overlap, so a worker's tasks never share a core or a GPU (threads never oversubscribe cores).
"""

from __future__ import annotations

MAX_DEVICE_ID = 65_535

DeviceSet = tuple[int, ...]


class DeviceSetError(ValueError):
    """The devices text is malformed; the message names the part that is wrong."""


def _ids(part: str) -> list[int]:
    first, dash, last = part.partition("-")
    try:
        low, high = int(first), int(last) if dash else int(first)
    except ValueError:
        raise DeviceSetError(f"{part!r} is not a device id or a range like 0-3") from None
    if low < 0 or high > MAX_DEVICE_ID or low > high:
        raise DeviceSetError(f"{part!r} is not a valid range (ids 0-{MAX_DEVICE_ID}, low-high)")
    return list(range(low, high + 1))


def parse_device_sets(text: str) -> list[DeviceSet]:
    """`0-3;4-7` -> [(0, 1, 2, 3), (4, 5, 6, 7)]; DeviceSetError for empty sets, bad ids or overlapping sets."""
    sets: list[DeviceSet] = []
    owner: dict[int, int] = {}
    for index, chunk in enumerate(text.split(";")):
        parts = [p.strip() for p in chunk.split(",") if p.strip()]
        if not parts:
            raise DeviceSetError(f"device set {index + 1} of {text!r} is empty")
        ids = sorted({i for part in parts for i in _ids(part)})
        for device in ids:
            if device in owner:
                raise DeviceSetError(f"device {device} is in sets {owner[device] + 1} and {index + 1}: sets may not "
                                     "overlap")
            owner[device] = index
        sets.append(tuple(ids))
    return sets


def format_device_set(devices: DeviceSet) -> str:
    """(0, 1, 2, 5) -> '0-2,5' (the inverse of one set of `parse_device_sets`)."""
    runs: list[str] = []
    start = prev = None
    for device in sorted(devices):
        if prev is not None and device == prev + 1:
            prev = device
            continue
        if start is not None:
            runs.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = device
    if start is not None:
        runs.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(runs)
