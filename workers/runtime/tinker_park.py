"""A Tinker training session's park state (docs/tinker.md#parking): everything its model holds beyond the frozen
base model, in one file under the job's artifacts, `<artifacts>/tinker/<team>/<job>/park.pt`.

    save(path, session, next_seq)    # the adapter's tensors, their accumulated gradients, the optimizer's state, the
                                     # step and the SDK seq id the session serves next
    load(path) -> dict | None        # None: the session never parked
    session.restore(state)           # workers/runtime/tinker_session.py

Invariants: the file is replaced atomically (written to `park.pt.tmp`, fsynced, renamed), so a reader (a session
restored after a kill -9 of its worker mid-save) finds the previous park or the new one, never half of one; a park
taken between `forward_backward` and `optim_step` keeps the gradients, so the step that follows is the same step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

PARK_FILE = "park.pt"
VERSION = 1


def park_path(artifacts: Path | str, team_id: int, job_id: int) -> Path:
    """Beside the session's checkpoints (backend/services/tinker.py `checkpoint_dir`)."""
    return Path(artifacts) / "tinker" / str(team_id) / str(job_id) / PARK_FILE


def save(path: Path, state: dict[str, Any]) -> float:
    """Write `state` (a session's `snapshot`) atomically; returns the seconds it took."""
    started = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    with staging.open("wb") as handle:
        torch.save({"version": VERSION, **state}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    return time.perf_counter() - started


def load(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("version") != VERSION:
        raise ValueError(f"{path} is park state version {state.get('version')}, this worker reads {VERSION}")
    return state


def discard(path: Path) -> None:
    """The session ended: its park state is not needed any more."""
    for stale in (path, path.with_name(path.name + ".tmp")):
        stale.unlink(missing_ok=True)
