"""Admin overrides of the device catalog, persisted as one JSON document `<data_dir>/device_catalog.json`.

The document maps device name -> DeviceSpec fields. Effective catalog = defaults updated by the overrides; an
override may add a device. Writes go through a temp file + rename so a crash never leaves half a document.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec

FILENAME = "device_catalog.json"


def _path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / FILENAME


def load_overrides(data_dir: str | os.PathLike[str]) -> dict[str, DeviceSpec]:
    path = _path(data_dir)
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {name: DeviceSpec(**{**fields, "name": name}) for name, fields in raw.items()}


def load_catalog(data_dir: str | os.PathLike[str] | None) -> dict[str, DeviceSpec]:
    """Defaults updated by the overrides under `data_dir` (defaults only when None)."""
    catalog = dict(DEFAULT_DEVICES)
    if data_dir is not None:
        catalog.update(load_overrides(data_dir))
    return catalog


def _write(data_dir: str | os.PathLike[str], overrides: dict[str, DeviceSpec]) -> None:
    path = _path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {name: {k: v for k, v in spec.to_dict().items() if k != "name"} for name, spec in overrides.items()}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".device_catalog.")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
    os.replace(tmp, path)


def save_override(data_dir: str | os.PathLike[str], spec: DeviceSpec) -> DeviceSpec:
    overrides = load_overrides(data_dir)
    overrides[spec.name] = spec
    _write(data_dir, overrides)
    return spec


def delete_override(data_dir: str | os.PathLike[str], name: str) -> bool:
    """Drop an override (a default device reverts to its default). False when there was none."""
    overrides = load_overrides(data_dir)
    if name not in overrides:
        return False
    del overrides[name]
    _write(data_dir, overrides)
    return True
